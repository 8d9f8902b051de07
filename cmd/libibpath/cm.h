/* The leading fields of librdmacm's public event and id structures
 * (<rdma/rdma_cma.h>, an ABI that librdmacm keeps under its RDMACM_1.0
 * symbol version): enough for the shim to read which QP an event is
 * about, without librdmacm's headers at build time. cbench/cm_check.c
 * checks these against the real header. */
#ifndef LIBIBPATH_CM_H
#define LIBIBPATH_CM_H

#include <infiniband/verbs.h>

struct lip_cm_id {
	struct ibv_context *verbs;
	void *channel;
	void *context;
	struct ibv_qp *qp;
};

struct lip_cm_event {
	struct lip_cm_id *id;
	struct lip_cm_id *listen_id;
	int event; /* enum rdma_cm_event_type */
	int status;
};

#define LIP_CM_EVENT_UNREACHABLE 7   /* RDMA_CM_EVENT_UNREACHABLE */
#define LIP_CM_EVENT_ESTABLISHED 9   /* RDMA_CM_EVENT_ESTABLISHED */
#define LIP_CM_EVENT_DISCONNECTED 10 /* RDMA_CM_EVENT_DISCONNECTED */

/* librdmacm's two calls, and what the shim decides */
struct lip_cm_ops {
	int (*get)(void *channel, struct lip_cm_event **ev);
	int (*ack)(struct lip_cm_event *ev);
	/* whether a layer of ibpath carries qp, whose connection is
	 * established (the event's status given) */
	int (*protects)(struct ibv_qp *qp, int status);
	/* qp's connection was established (up 1) or ended (up 0) */
	void (*established)(struct ibv_qp *qp, int up);
};

int lip_cm_hide(const struct lip_cm_event *ev, const struct lip_cm_ops *ops);
int lip_cm_next(void *channel, struct lip_cm_event **ev, const struct lip_cm_ops *ops);

#endif
