/* A stand-in librdmacm for the preload tests: rdma_get_cm_event returns
 * the events queued with fakecm_queue, in order, then EAGAIN (a
 * non-blocking channel with nothing pending); rdma_ack_cm_event counts. */
#include <errno.h>
#include <rdma/rdma_cma.h>

#define FAKECM_MAX 8

static struct rdma_cm_id ids[FAKECM_MAX];
static struct rdma_cm_event evs[FAKECM_MAX];
static int queued, taken, acked;

void fakecm_queue(struct ibv_qp *qp, int event, int status)
{
	if (queued == FAKECM_MAX)
		return;
	ids[queued].qp = qp;
	ids[queued].verbs = qp ? qp->context : NULL;
	evs[queued].id = &ids[queued];
	evs[queued].event = event;
	evs[queued].status = status;
	queued++;
}

int fakecm_acks(void) { return acked; }

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	(void)channel;
	if (taken == queued) {
		errno = EAGAIN;
		return -1;
	}
	*event = &evs[taken++];
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	(void)event;
	acked++;
	return 0;
}
