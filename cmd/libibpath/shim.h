/* libibpath: the C side of the LD_PRELOAD shim. The interposed control
 * verbs (interpose.c) forward to libibverbs and tell the Go side; the
 * Default-state hot path (hotpath.c) swaps each context's post_send,
 * post_recv and poll_cq for wrappers that record every work request in a
 * per-QP shadow ring without allocating, then call the provider. */
#ifndef IBPATH_SHIM_H
#define IBPATH_SHIM_H

#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

#define IBP_MAX_SGE 4       /* SGEs kept per shadow entry; more marks the entry partial */
#define IBP_MAX_CTX 64      /* open device contexts tracked */
#define IBP_QP_SLOTS 4096   /* QPs per context (open addressing on qp_num) */

/* A send work request as recorded for replay. */
struct ibp_sqe {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm;
	uint32_t rkey;
	uint32_t num_sge;
	uint32_t flags;         /* IBP_SQE_* */
	struct ibv_sge sge[IBP_MAX_SGE];
};

#define IBP_SQE_VOID    1u  /* the provider refused it: never posted */
#define IBP_SQE_PARTIAL 2u  /* more SGEs than kept: cannot be replayed */

struct ibp_rqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t flags;
	struct ibv_sge sge[IBP_MAX_SGE];
};

/* One protected QP: its shadow rings. Heads are advanced by posters
 * (atomically: several threads may post to one QP), tails by pollers. */
struct ibp_qp {
	struct ibv_qp *qp;
	uint32_t qpn;
	int sig_all;
	uint32_t smask, rmask;  /* ring sizes - 1 (powers of two) */
	uint64_t shead, stail;  /* send ring: posted, retired */
	uint64_t rhead, rtail;  /* receive ring */
	uint64_t overflow;      /* entries overwritten before retirement */
	struct ibp_sqe *sq;
	struct ibp_rqe *rq;
};

#define IBP_SLOT_DEAD ((struct ibp_qp *)1)

struct ibp_ctx {
	struct ibv_context *ctx;
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	pthread_mutex_t mu;     /* serialises inserts into slots */
	struct ibp_qp *slots[IBP_QP_SLOTS];
};

/* hotpath.c */
struct ibp_ctx *ibp_ctx_add(struct ibv_context *ctx);
void ibp_ctx_remove(struct ibv_context *ctx);
struct ibp_ctx *ibp_ctx_of(struct ibv_context *ctx);
struct ibp_qp *ibp_qp_add(struct ibv_qp *qp, uint32_t max_send_wr, uint32_t max_recv_wr, int sig_all);
void ibp_qp_remove(struct ibv_qp *qp);
struct ibp_qp *ibp_qp_find(struct ibp_ctx *c, uint32_t qpn);
int ibp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int ibp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int ibp_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
/* outstanding entries of a QP (posted, not retired) */
void ibp_qp_outstanding(struct ibp_qp *q, uint64_t *send, uint64_t *recv);

/* interpose.c */
extern int ibp_enabled;     /* 0: pure pass-through (IBPATH_DISABLE=1) */
extern int ibp_record;      /* 1: shadow rings on (layer 2 bookkeeping) */

#endif
