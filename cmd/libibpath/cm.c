/* rdma_cm events the application must not see: on RoCE the kernel's
 * rdma_cm watches the neighbour (ARP) entry of every connected id, and
 * when the entry for the peer fails (a cable pulled: the entry's probes
 * go unanswered for about 3 s) it reports RDMA_CM_EVENT_UNREACHABLE on
 * the id, connection established or not. A program that gets it tears
 * the connection down (libfabric's rxm does, and an MPI job then
 * aborts), although the QP behind it runs on, on its backup. So the
 * event of an established connection whose QP a layer of ibpath
 * carries is acknowledged here and the application gets the next one
 * (interpose.c's rdma_get_cm_event). */
#include <stddef.h>
#include "cm.h"

/* lip_cm_hide reports whether ev is kept from the application: an
 * UNREACHABLE of an id with a QP that ops->protects says a layer carries
 * (the Go side also checks that the QP's connection was established:
 * an UNREACHABLE of a connection being set up is its failure, and a
 * synchronous id's librdmacm waits for it). */
int lip_cm_hide(const struct lip_cm_event *ev, const struct lip_cm_ops *ops)
{
	if (!ev || ev->event != LIP_CM_EVENT_UNREACHABLE || !ev->id || !ev->id->qp)
		return 0;
	return ops->protects(ev->id->qp, ev->status);
}

/* note tells the Go side when a QP's connection is established or ends
 * (an event the application gets). */
static void note(const struct lip_cm_event *ev, const struct lip_cm_ops *ops)
{
	if (!ev->id || !ev->id->qp)
		return;
	if (ev->event == LIP_CM_EVENT_ESTABLISHED)
		ops->established(ev->id->qp, 1);
	else if (ev->event == LIP_CM_EVENT_DISCONNECTED)
		ops->established(ev->id->qp, 0);
}

/* lip_cm_next gets the next event of channel for the application: the
 * events lip_cm_hide keeps from it are acknowledged and skipped. On a
 * channel without O_NONBLOCK that waits for the next event, as the call
 * would have if the kernel had not reported the hidden one; on a
 * non-blocking channel with nothing more, get's EAGAIN is returned. */
int lip_cm_next(void *channel, struct lip_cm_event **ev, const struct lip_cm_ops *ops)
{
	for (;;) {
		int ret = ops->get(channel, ev);
		if (ret)
			return ret;
		if (!lip_cm_hide(*ev, ops)) {
			note(*ev, ops);
			return 0;
		}
		ops->ack(*ev);
	}
}
