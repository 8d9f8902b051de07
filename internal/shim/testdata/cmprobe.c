/* A program that reads rdma_cm events, for the preload tests: it connects
 * an RC QP on the stand-in device (fakeverbs.c), has the stand-in
 * librdmacm (fakecm.c) report the id of that QP ESTABLISHED, UNREACHABLE
 * and DISCONNECTED, and prints what rdma_get_cm_event gives it. */
#include "connect.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct ibv_device *fake_device(void);
void fakecm_queue(struct ibv_qp *qp, int event, int status);
int fakecm_acks(void);

int main(void)
{
	struct ibv_context *ctx = ibv_open_device(fake_device());
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp) {
		fprintf(stderr, "cmprobe: no QP: %s\n", strerror(errno));
		return 2;
	}
	int ret = probe_connect(qp);
	if (ret) {
		fprintf(stderr, "cmprobe: connect the QP: %s\n", strerror(ret));
		return 3;
	}
	fakecm_queue(qp, RDMA_CM_EVENT_ESTABLISHED, 0);
	fakecm_queue(qp, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
	fakecm_queue(qp, RDMA_CM_EVENT_DISCONNECTED, 0);
	for (;;) {
		struct rdma_cm_event *ev = NULL;
		if (rdma_get_cm_event(NULL, &ev)) {
			printf("no event: %s\n", errno == EAGAIN ? "EAGAIN" : strerror(errno));
			break;
		}
		printf("event %d status %d own_qp %d\n", (int)ev->event, ev->status, ev->id && ev->id->qp == qp);
		rdma_ack_cm_event(ev);
	}
	printf("acks %d\n", fakecm_acks());
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
