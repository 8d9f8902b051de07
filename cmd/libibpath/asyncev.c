/* The filter of the application's async events: see asyncev.h. */
#include "asyncev.h"

int lip_async_keepable(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		return 1;
	default:
		return 0;
	}
}

int lip_async_filter(struct ibv_context *ctx, struct ibv_async_event *ev, const struct lip_async_ops *ops)
{
	for (;;) {
		int ret = ops->get(ctx, ev);
		if (ret)
			return ret;
		if (!ops->keep(ctx, ev))
			return 0;
		/* kept: acknowledged here, or ibv_destroy_qp would wait for it */
		ops->ack(ev);
	}
}
