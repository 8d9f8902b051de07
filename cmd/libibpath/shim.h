/* libibpath: the C side of the LD_PRELOAD shim. The interposed control
 * verbs (interpose.c) forward to libibverbs and tell the Go side; the
 * Default-state hot path (hotpath.c) swaps each context's post_send,
 * post_recv and poll_cq for wrappers that record every work request in a
 * per-QP shadow ring without allocating, then call the provider. */
#ifndef LIBIBPATH_SHIM_H
#define LIBIBPATH_SHIM_H

#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

#define LIP_MAX_SGE 4       /* SGEs kept per shadow entry; more marks the entry partial */
#define LIP_MAX_CTX 64      /* open device contexts tracked */
#define LIP_QP_SLOTS 4096   /* QPs per context (open addressing on qp_num) */
#define LIP_PTR_SLOTS 16384 /* QPs of the process (open addressing on the ibv_qp address) */

/* A send work request as recorded for replay. */
struct lip_sqe {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm;
	uint32_t rkey;
	uint32_t num_sge;
	uint32_t flags;         /* LIP_SQE_* */
	struct ibv_sge sge[LIP_MAX_SGE];
};

#define LIP_SQE_VOID    1u  /* the provider refused it: never posted */
#define LIP_SQE_PARTIAL 2u  /* more SGEs than kept: cannot be replayed */

struct lip_rqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t flags;
	struct ibv_sge sge[LIP_MAX_SGE];
};

/* One protected QP: its shadow rings. Heads are advanced by posters
 * (atomically: several threads may post to one QP), tails by pollers. */
struct lip_qp {
	struct ibv_qp *qp;
	struct lip_ctx *ctx;
	uint32_t qpn;
	int sig_all;
	uint32_t smask, rmask;  /* ring sizes - 1 (powers of two) */
	uint64_t shead, stail;  /* send ring: posted, retired */
	uint64_t rhead, rtail;  /* receive ring */
	uint64_t overflow;      /* entries overwritten before retirement */
	struct lip_sqe *sq;
	struct lip_rqe *rq;
};

#define LIP_SLOT_DEAD ((struct lip_qp *)1)

struct lip_ctx {
	struct ibv_context *ctx;
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	pthread_mutex_t mu;     /* serialises inserts into slots */
	struct lip_qp *slots[LIP_QP_SLOTS];
};

/* hotpath.c */
struct lip_ctx *lip_ctx_add(struct ibv_context *ctx);
void lip_ctx_remove(struct ibv_context *ctx);
struct lip_ctx *lip_ctx_of(struct ibv_context *ctx);
struct lip_qp *lip_qp_add(struct ibv_qp *qp, uint32_t max_send_wr, uint32_t max_recv_wr, int sig_all);
void lip_qp_remove(struct ibv_qp *qp);
struct lip_qp *lip_qp_find(struct lip_ctx *c, uint32_t qpn);
int lip_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int lip_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int lip_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
/* outstanding entries of a QP (posted, not retired) */
void lip_qp_outstanding(struct lip_qp *q, uint64_t *send, uint64_t *recv);

/* interpose.c */
extern int lip_enabled;     /* 0: pure pass-through (IBPATH_DISABLE=1) */
extern int lip_record;      /* 1: shadow rings on (layer 2 bookkeeping) */
extern int lip_single_poster; /* 1: each QP is posted to by one thread at a time */

#endif
