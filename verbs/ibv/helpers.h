/* C side of package ibv: the pieces of libibverbs that are static inline
 * or macros (and so cannot be called from Go directly), the work-request
 * scratch arrays, and dumpers used by the conversion tests. */
#ifndef IBPATH_IBV_HELPERS_H
#define IBPATH_IBV_HELPERS_H

#include <stdint.h>
#include <stddef.h>
#include <infiniband/verbs.h>

/* One send WR as Go fills it: the flattened RC subset of struct
 * ibv_send_wr. imm_data is in host order here. */
struct ibp_send_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t rkey;
	uint32_t imm_data;
	uint32_t send_flags;
	uint32_t opcode;
	uint32_t num_sge;
};

struct ibp_recv_wr {
	uint64_t wr_id;
	uint32_t num_sge;
};

/* Per-QP, per-direction scratch in C memory: what Go fills (flat WRs and
 * SGEs) and the struct ibv_*_wr chain built from it. Grown with realloc,
 * never on the Go heap. */
struct ibp_scratch {
	int wr_cap;
	int sge_cap;
	struct ibp_send_wr *swr; /* send direction */
	struct ibv_send_wr *ssend;
	struct ibp_recv_wr *rwr; /* receive direction */
	struct ibv_recv_wr *rrecv;
	struct ibv_sge *sge;
};

struct ibp_scratch *ibp_scratch_new(void);
int ibp_scratch_reserve(struct ibp_scratch *s, int nwr, int nsge);
void ibp_scratch_free(struct ibp_scratch *s);

/* Build the ibv_send_wr chain for n WRs (SGEs taken in order). */
void ibp_build_send(struct ibp_scratch *s, int n);
void ibp_build_recv(struct ibp_scratch *s, int n);

/* The data-path functions of a context, when they are not the ones its
 * ops table holds now (a NULL member: call through the table, as the
 * inline verbs do). */
struct ibp_ops {
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
};

/* Post; *bad is the index of the bad WR (n when none). Returns what
 * ibv_post_send/ibv_post_recv returned. */
int ibp_post_send(const struct ibp_ops *ops, struct ibv_qp *qp, struct ibp_scratch *s, int n, int *bad);
int ibp_post_recv(const struct ibp_ops *ops, struct ibv_qp *qp, struct ibp_scratch *s, int n, int *bad);
int ibp_post_srq_recv(const struct ibp_ops *ops, struct ibv_srq *srq, struct ibp_scratch *s, int n, int *bad);

int ibp_poll_cq(const struct ibp_ops *ops, struct ibv_cq *cq, int n, struct ibv_wc *wc);
int ibp_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int ibp_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int ibp_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		     struct ibv_gid_entry *entry);
struct ibv_mr *ibp_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access);
struct ibv_mr *ibp_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access);

/* Async and completion channel fds: O_NONBLOCK, and a zero-timeout
 * readiness check for fds this package must not change. */
int ibp_set_nonblock(int fd);
int ibp_fd_readable(int fd);

/* ibv_get_async_event, split: *elem is the QP, CQ, SRQ or WQ pointer and
 * *port the port number, as the event type says. Events whose element
 * this package does not model (SRQ, WQ) are acknowledged here. */
int ibp_get_async_event(struct ibv_context *ctx, int *type, void **elem, int *port);
void ibp_ack_async_event(int type, void *elem, int port);

int ibp_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq);

/* Conversion test helpers (no device needed). */
int ibp_dump_qp_attr(const struct ibv_qp_attr *a, char *buf, int len);
void ibp_fill_qp_attr(struct ibv_qp_attr *a);
int ibp_dump_send_chain(struct ibp_scratch *s, int n, char *buf, int len);
int ibp_dump_recv_chain(struct ibp_scratch *s, int n, char *buf, int len);
void ibp_fill_wc(struct ibv_wc *wc);

#endif
