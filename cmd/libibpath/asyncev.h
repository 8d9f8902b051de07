/* The filter of the application's async events (asyncev.c): a fatal
 * event of a QP that layer 2 carries on its backup, or a DEVICE_FATAL of
 * a device all of whose QPs it carries, is acknowledged and not returned
 * (NCCL's async thread ends the communicator on them); the application
 * gets the next event. When the failover it was kept for surfaces later,
 * the Go side gives the event back (lip_async_give): the application's
 * next ibv_get_async_event returns it, and one blocked in it wakes. The
 * operations are the real libibverbs calls and the Go side's decision,
 * so that cbench/asyncev_check.c can script them. */
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

/* lip_async_filter is ibv_get_async_event through the filter: an event
 * given back first, else what get returns, less the events keep takes
 * (each acknowledged). A get that fails (EAGAIN on a non-blocking fd)
 * fails the call as it would. Once the filter kept an event of ctx, a
 * wait on its blocking async fd also wakes for a give-back. */
int lip_async_filter(struct ibv_context *ctx, struct ibv_async_event *ev, const struct lip_async_ops *ops);

/* LIP_ASYNC_BACK: how many given-back events a context holds, waiting
 * for the application, and how many it handed out unacknowledged */
#define LIP_ASYNC_BACK 16

/* lip_async_give gives a kept event back: type of qp (NULL for
 * DEVICE_FATAL) on ctx, returned by the application's next
 * ibv_get_async_event of ctx. -1 (ENOSPC): LIP_ASYNC_BACK are waiting
 * already, or ctx has no room (ENOMEM: no eventfd). */
int lip_async_give(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type type);

/* lip_async_acked: ev is a given-back event the application
 * acknowledges. 1: it was (libibverbs must not count the
 * acknowledgement: ibv_destroy_qp would wait for ever); 0: a real one. */
int lip_async_acked(const struct ibv_async_event *ev);

/* lip_async_forget_qp drops what is given back of qp, before the
 * application destroys it (the kernel drops a destroyed QP's events). */
void lip_async_forget_qp(struct ibv_qp *qp);

/* lip_async_close forgets ctx (ibv_close_device). */
void lip_async_close(struct ibv_context *ctx);

#endif
