/* The filter of the application's async events (asyncev.c): a fatal
 * event of a QP that layer 2 carries on its backup, or a DEVICE_FATAL of
 * a device all of whose QPs it carries, is acknowledged and not returned
 * (NCCL's async thread ends the communicator on them); the application
 * gets the next event. The operations are the real libibverbs calls and
 * the Go side's decision, so that cbench/asyncev_check.c can script them. */
#ifndef LIBIBPATH_ASYNCEV_H
#define LIBIBPATH_ASYNCEV_H

#include <infiniband/verbs.h>

struct lip_async_ops {
	int (*get)(struct ibv_context *ctx, struct ibv_async_event *ev);
	void (*ack)(struct ibv_async_event *ev);
	/* 1: keep ev from the application (the Go side records every event) */
	int (*keep)(struct ibv_context *ctx, const struct ibv_async_event *ev);
};

/* lip_async_keepable: the events the filter may keep: those NCCL takes
 * as fatal and a failover makes moot (CQ_ERR, a CQ overrun, is not) */
int lip_async_keepable(enum ibv_event_type t);

/* lip_async_filter is ibv_get_async_event through the filter: what get
 * returns, less the events keep takes (each acknowledged). A get that
 * fails (EAGAIN on a non-blocking fd) fails the call as it would. */
int lip_async_filter(struct ibv_context *ctx, struct ibv_async_event *ev, const struct lip_async_ops *ops);

#endif
