#define _GNU_SOURCE
#include <dlfcn.h>
#include "helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ibp_scratch *ibp_scratch_new(void)
{
	struct ibp_scratch *s = calloc(1, sizeof(*s));

	if (s && ibp_scratch_reserve(s, 16, 64)) {
		ibp_scratch_free(s);
		return NULL;
	}
	return s;
}

static int grow(void **p, size_t n, size_t size)
{
	void *q = realloc(*p, n * size);

	if (!q)
		return ENOMEM;
	*p = q;
	return 0;
}

int ibp_scratch_reserve(struct ibp_scratch *s, int nwr, int nsge)
{
	if (nwr > s->wr_cap) {
		if (grow((void **)&s->swr, nwr, sizeof(*s->swr)) ||
		    grow((void **)&s->ssend, nwr, sizeof(*s->ssend)) ||
		    grow((void **)&s->rwr, nwr, sizeof(*s->rwr)) ||
		    grow((void **)&s->rrecv, nwr, sizeof(*s->rrecv)))
			return ENOMEM;
		s->wr_cap = nwr;
	}
	if (nsge > s->sge_cap) {
		if (grow((void **)&s->sge, nsge, sizeof(*s->sge)))
			return ENOMEM;
		s->sge_cap = nsge;
	}
	return 0;
}

void ibp_scratch_free(struct ibp_scratch *s)
{
	if (!s)
		return;
	free(s->swr);
	free(s->ssend);
	free(s->rwr);
	free(s->rrecv);
	free(s->sge);
	free(s);
}

void ibp_build_send(struct ibp_scratch *s, int n)
{
	struct ibv_sge *sge = s->sge;
	int i;

	for (i = 0; i < n; i++) {
		const struct ibp_send_wr *f = &s->swr[i];
		struct ibv_send_wr *w = &s->ssend[i];

		memset(w, 0, sizeof(*w));
		w->wr_id = f->wr_id;
		w->next = i + 1 < n ? &s->ssend[i + 1] : NULL;
		w->sg_list = f->num_sge ? sge : NULL;
		w->num_sge = (int)f->num_sge;
		sge += f->num_sge;
		w->opcode = (enum ibv_wr_opcode)f->opcode;
		w->send_flags = f->send_flags;
		w->imm_data = htonl(f->imm_data);
		switch (w->opcode) {
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			w->wr.atomic.remote_addr = f->remote_addr;
			w->wr.atomic.compare_add = f->compare_add;
			w->wr.atomic.swap = f->swap;
			w->wr.atomic.rkey = f->rkey;
			break;
		default:
			w->wr.rdma.remote_addr = f->remote_addr;
			w->wr.rdma.rkey = f->rkey;
			break;
		}
	}
}

void ibp_build_recv(struct ibp_scratch *s, int n)
{
	struct ibv_sge *sge = s->sge;
	int i;

	for (i = 0; i < n; i++) {
		const struct ibp_recv_wr *f = &s->rwr[i];
		struct ibv_recv_wr *w = &s->rrecv[i];

		w->wr_id = f->wr_id;
		w->next = i + 1 < n ? &s->rrecv[i + 1] : NULL;
		w->sg_list = f->num_sge ? sge : NULL;
		w->num_sge = (int)f->num_sge;
		sge += f->num_sge;
	}
}

int ibp_post_send(const struct ibp_ops *ops, struct ibv_qp *qp, struct ibp_scratch *s, int n, int *bad)
{
	struct ibv_send_wr *b = NULL;
	int ret;

	ibp_build_send(s, n);
	ret = ops->post_send ? ops->post_send(qp, s->ssend, &b) : ibv_post_send(qp, s->ssend, &b);
	*bad = ret && b ? (int)(b - s->ssend) : (ret ? 0 : n);
	return ret;
}

int ibp_post_recv(const struct ibp_ops *ops, struct ibv_qp *qp, struct ibp_scratch *s, int n, int *bad)
{
	struct ibv_recv_wr *b = NULL;
	int ret;

	ibp_build_recv(s, n);
	ret = ops->post_recv ? ops->post_recv(qp, s->rrecv, &b) : ibv_post_recv(qp, s->rrecv, &b);
	*bad = ret && b ? (int)(b - s->rrecv) : (ret ? 0 : n);
	return ret;
}

int ibp_post_srq_recv(const struct ibp_ops *ops, struct ibv_srq *srq, struct ibp_scratch *s, int n, int *bad)
{
	struct ibv_recv_wr *b = NULL;
	int ret;

	ibp_build_recv(s, n);
	ret = ops->post_srq_recv ? ops->post_srq_recv(srq, s->rrecv, &b) : ibv_post_srq_recv(srq, s->rrecv, &b);
	*bad = ret && b ? (int)(b - s->rrecv) : (ret ? 0 : n);
	return ret;
}

int ibp_poll_cq(const struct ibp_ops *ops, struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ops->poll_cq ? ops->poll_cq(cq, n, wc) : ibv_poll_cq(cq, n, wc);
}

int ibp_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

int ibp_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

int ibp_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		     struct ibv_gid_entry *entry)
{
	return ibv_query_gid_ex(ctx, port, index, entry, 0);
}

struct ibv_mr *ibp_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access)
{
	return ibv_reg_mr(pd, (void *)addr, len, access);
}

/* ibp_reg_dmabuf_mr is ibv_reg_dmabuf_mr (IBVERBS_1.12, rdma-core 34),
 * looked up at its first call rather than bound at load: a binary bound
 * to it would not load at all with an older libibverbs. Without it the
 * call fails with EOPNOTSUPP. */
struct ibv_mr *ibp_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access)
{
	typedef struct ibv_mr *(*reg_fn)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
	static reg_fn f;
	if (!f)
		f = (reg_fn)dlvsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
	if (!f) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return f(pd, offset, len, iova, fd, access);
}

int ibp_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	return 0;
}

/* 1 readable, 0 not, -errno on failure. */
int ibp_fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, 0);

	if (r < 0)
		return -errno;
	return r > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP));
}

int ibp_get_async_event(struct ibv_context *ctx, int *type, void **elem, int *port)
{
	struct ibv_async_event ev;

	if (ibv_get_async_event(ctx, &ev))
		return errno ? errno : EIO;
	*type = ev.event_type;
	*elem = NULL;
	*port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		*elem = ev.element.cq;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*elem = ev.element.qp;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
	case IBV_EVENT_WQ_FATAL:
		ibv_ack_async_event(&ev);
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	return 0;
}

void ibp_ack_async_event(int type, void *elem, int port)
{
	struct ibv_async_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_type = (enum ibv_event_type)type;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		ev.element.cq = elem;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		ev.element.qp = elem;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
	case IBV_EVENT_WQ_FATAL:
		return; /* acknowledged when read */
	default:
		ev.element.port_num = port;
		break;
	}
	ibv_ack_async_event(&ev);
}

int ibp_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq)
{
	void *cq_ctx;

	if (ibv_get_cq_event(ch, cq, &cq_ctx))
		return errno ? errno : EIO;
	return 0;
}

/* snprintf that never reports more than it wrote: dumpers chain calls on
 * buf + n, len - n. */
static int put(char *buf, int len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int put(char *buf, int len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (len <= 1)
		return 0;
	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return 0;
	return n < len ? n : len - 1;
}

static int dump_ah(char *buf, int len, const char *p, const struct ibv_ah_attr *ah)
{
	char g[64];
	int i, n = 0;

	for (i = 0; i < 16; i++)
		n += put(g + n, sizeof(g) - n, "%02x", ah->grh.dgid.raw[i]);
	return put(buf, len,
			"%s.grh.dgid=%s %s.grh.flow_label=%u %s.grh.sgid_index=%u "
			"%s.grh.hop_limit=%u %s.grh.traffic_class=%u %s.dlid=%u %s.sl=%u "
			"%s.src_path_bits=%u %s.static_rate=%u %s.is_global=%u %s.port_num=%u ",
			p, g, p, ah->grh.flow_label, p, ah->grh.sgid_index, p, ah->grh.hop_limit,
			p, ah->grh.traffic_class, p, ah->dlid, p, ah->sl, p, ah->src_path_bits,
			p, ah->static_rate, p, ah->is_global, p, ah->port_num);
}

int ibp_dump_qp_attr(const struct ibv_qp_attr *a, char *buf, int len)
{
	int n = put(buf, len,
			 "qp_state=%u cur_qp_state=%u path_mtu=%u path_mig_state=%u qkey=%u "
			 "rq_psn=%u sq_psn=%u dest_qp_num=%u qp_access_flags=%u "
			 "cap.max_send_wr=%u cap.max_recv_wr=%u cap.max_send_sge=%u "
			 "cap.max_recv_sge=%u cap.max_inline_data=%u ",
			 a->qp_state, a->cur_qp_state, a->path_mtu, a->path_mig_state, a->qkey,
			 a->rq_psn, a->sq_psn, a->dest_qp_num, a->qp_access_flags,
			 a->cap.max_send_wr, a->cap.max_recv_wr, a->cap.max_send_sge,
			 a->cap.max_recv_sge, a->cap.max_inline_data);
	n += dump_ah(buf + n, len - n, "ah_attr", &a->ah_attr);
	n += dump_ah(buf + n, len - n, "alt_ah_attr", &a->alt_ah_attr);
	n += put(buf + n, len - n,
		      "pkey_index=%u alt_pkey_index=%u en_sqd_async_notify=%u sq_draining=%u "
		      "max_rd_atomic=%u max_dest_rd_atomic=%u min_rnr_timer=%u port_num=%u "
		      "timeout=%u retry_cnt=%u rnr_retry=%u alt_port_num=%u alt_timeout=%u "
		      "rate_limit=%u",
		      a->pkey_index, a->alt_pkey_index, a->en_sqd_async_notify, a->sq_draining,
		      a->max_rd_atomic, a->max_dest_rd_atomic, a->min_rnr_timer, a->port_num,
		      a->timeout, a->retry_cnt, a->rnr_retry, a->alt_port_num, a->alt_timeout,
		      a->rate_limit);
	return n;
}

static void fill_ah(struct ibv_ah_attr *ah, unsigned base)
{
	int i;

	for (i = 0; i < 16; i++)
		ah->grh.dgid.raw[i] = (uint8_t)(base + i);
	ah->grh.flow_label = base + 20;
	ah->grh.sgid_index = base + 21;
	ah->grh.hop_limit = base + 22;
	ah->grh.traffic_class = base + 23;
	ah->dlid = base + 24;
	ah->sl = base + 25;
	ah->src_path_bits = base + 26;
	ah->static_rate = base + 27;
	ah->is_global = 1;
	ah->port_num = base + 28;
}

/* Every field a distinct value, named by its C field: the test checks the
 * Go field of the same name. */
void ibp_fill_qp_attr(struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->cur_qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_2048;
	a->path_mig_state = IBV_MIG_ARMED;
	a->qkey = 0x11111111;
	a->rq_psn = 0x222222;
	a->sq_psn = 0x333333;
	a->dest_qp_num = 0x444444;
	a->qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	a->cap.max_send_wr = 101;
	a->cap.max_recv_wr = 102;
	a->cap.max_send_sge = 103;
	a->cap.max_recv_sge = 104;
	a->cap.max_inline_data = 105;
	fill_ah(&a->ah_attr, 10);
	fill_ah(&a->alt_ah_attr, 100);
	a->pkey_index = 201;
	a->alt_pkey_index = 202;
	a->en_sqd_async_notify = 1;
	a->sq_draining = 1;
	a->max_rd_atomic = 205;
	a->max_dest_rd_atomic = 206;
	a->min_rnr_timer = 207;
	a->port_num = 208;
	a->timeout = 209;
	a->retry_cnt = 210;
	a->rnr_retry = 211;
	a->alt_port_num = 212;
	a->alt_timeout = 213;
	a->rate_limit = 214;
}

int ibp_dump_send_chain(struct ibp_scratch *s, int n, char *buf, int len)
{
	const struct ibv_send_wr *w;
	int off = 0, i;

	ibp_build_send(s, n);
	for (w = n ? s->ssend : NULL; w && off < len; w = w->next) {
		int atomic = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
			     w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;

		off += put(buf + off, len - off,
				"wr_id=%llu opcode=%u send_flags=%u imm_data_be=%08x num_sge=%d",
				(unsigned long long)w->wr_id, w->opcode, w->send_flags,
				ntohl(w->imm_data), w->num_sge);
		if (atomic)
			off += put(buf + off, len - off,
					" atomic.remote_addr=%llx atomic.rkey=%x atomic.compare_add=%llx atomic.swap=%llx",
					(unsigned long long)w->wr.atomic.remote_addr, w->wr.atomic.rkey,
					(unsigned long long)w->wr.atomic.compare_add,
					(unsigned long long)w->wr.atomic.swap);
		else
			off += put(buf + off, len - off, " rdma.remote_addr=%llx rdma.rkey=%x",
					(unsigned long long)w->wr.rdma.remote_addr, w->wr.rdma.rkey);
		for (i = 0; i < w->num_sge; i++)
			off += put(buf + off, len - off, " sge[%d]=%llx/%u/%x", i,
					(unsigned long long)w->sg_list[i].addr,
					w->sg_list[i].length, w->sg_list[i].lkey);
		off += put(buf + off, len - off, "\n");
	}
	return off;
}

int ibp_dump_recv_chain(struct ibp_scratch *s, int n, char *buf, int len)
{
	const struct ibv_recv_wr *w;
	int off = 0, i;

	ibp_build_recv(s, n);
	for (w = n ? s->rrecv : NULL; w && off < len; w = w->next) {
		off += put(buf + off, len - off, "wr_id=%llu num_sge=%d",
				(unsigned long long)w->wr_id, w->num_sge);
		for (i = 0; i < w->num_sge; i++)
			off += put(buf + off, len - off, " sge[%d]=%llx/%u/%x", i,
					(unsigned long long)w->sg_list[i].addr,
					w->sg_list[i].length, w->sg_list[i].lkey);
		off += put(buf + off, len - off, "\n");
	}
	return off;
}

void ibp_fill_wc(struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = 0x0102030405060708ULL;
	wc->status = IBV_WC_RETRY_EXC_ERR;
	wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
	wc->vendor_err = 0x81;
	wc->byte_len = 4096;
	wc->imm_data = htonl(0xdeadbeef);
	wc->qp_num = 0x1234;
	wc->src_qp = 0x5678;
	wc->wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH;
	wc->pkey_index = 7;
	wc->slid = 0x99;
	wc->sl = 3;
	wc->dlid_path_bits = 5;
}
