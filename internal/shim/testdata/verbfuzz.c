/* verbfuzz: seeded random verb programs on the stand-in provider
 * (fakeverbs.c), for the robustness harness (robust_preload_test.go).
 * Run once without the shim and once under it, the two outputs must be
 * the same: every return code, errno and completion a program saw.
 *
 *   verbfuzz SEED N          N programs, one line each: "P ops H" with the
 *                            hash H of everything program P saw; at the end
 *                            "rss KB" (the process's VmRSS)
 *   verbfuzz SEED N P        program P only, every step on its own line
 *
 * A program is up to 60 steps drawn from: open and close a device
 * context; allocate and free a PD; register memory (plain, explicit and
 * implicit on-demand paging, dma-buf, zero length), re-register and
 * deregister it; create CQs (plain, extended, on a completion channel, of
 * sizes the device refuses) and destroy them; create shared receive
 * queues, post receives to them and destroy them; create QPs (RC, UC, UD,
 * XRC send, with odd capabilities, the ibv_wr_* API, RC on an SRQ) and
 * destroy them; have messages arrive on a QP of an SRQ; modify
 * them to any state with any attributes, legal or not (alternate paths
 * included); query them; post chains of every opcode, inline or not,
 * signaled or not, refused by the provider (wr_id 0xbad) or not, and
 * receives; poll, with ibv_poll_cq and ibv_start_poll; arm CQs; read async
 * events without blocking; fork a child that calls a verb and exits;
 * dlopen libibverbs and call a verb through it; run three threads posting
 * and polling their own QPs at once. Only what plain verbs define is
 * done: no object is used after it was freed, a context is closed only
 * when nothing of it is left, a CQ or PD is freed only when nothing uses
 * it. Everything left is freed at the end of the program. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct ibv_device *fake_device(void);
int fake_srq_deliver(struct ibv_qp *qp, int n);

static uint64_t rng;
static uint64_t next64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
static unsigned pick(unsigned n) { return n ? (unsigned)(next64() % n) : 0; }

static int verbose;
static uint64_t hash;
static long nops;

/* out records one thing the program saw */
static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n >= (int)sizeof buf)
		n = sizeof buf - 1;
	for (int i = 0; i < n; i++)
		hash = (hash ^ (unsigned char)buf[i]) * 0x100000001b3ull;
	hash = (hash ^ '\n') * 0x100000001b3ull;
	nops++;
	if (verbose)
		printf("%s\n", buf);
}

enum { NCTX = 3, NPD = 6, NMR = 8, NCQ = 8, NQP = 10, NCH = 3, NSRQ = 3 };

struct cq {
	struct ibv_cq *cq;
	struct ibv_cq_ex *ex; /* from ibv_create_cq_ex */
	int ctx, users;
	int ch; /* its completion channel, or -1 */
};
struct qp {
	struct ibv_qp *qp;
	int ctx, pd, scq, rcq;
	int srq; /* its SRQ, or -1 */
	int idx; /* the program's name for it: completions print it, not qp_num */
};

static struct ibv_context *ctxs[NCTX];
static int ctx_objs[NCTX];
static struct ibv_pd *pds[NPD];
static int pd_ctx[NPD], pd_users[NPD];
static struct ibv_mr *mrs[NMR];
static int mr_pd[NMR], mr_fd[NMR];
static struct cq cqs[NCQ];
static struct qp qps[NQP];
static struct ibv_comp_channel *chans[NCH];
static struct ibv_srq *srqs[NSRQ];
static int srq_pd[NSRQ], srq_users[NSRQ];
static int chan_ctx[NCH], chan_users[NCH];
static int next_idx;
static char mem[1 << 16];

static int any_lkey(void);

static int live_ctx(void)
{
	int c[NCTX], n = 0;
	for (int i = 0; i < NCTX; i++)
		if (ctxs[i])
			c[n++] = i;
	return n ? c[pick(n)] : -1;
}

#define PICK_LIVE(arr, N, field)                      \
	({                                            \
		int _c[N], _n = 0;                    \
		for (int _i = 0; _i < (N); _i++)      \
			if (arr[_i] field)            \
				_c[_n++] = _i;        \
		_n ? _c[pick(_n)] : -1;               \
	})

static int qp_index_of(uint32_t qpn)
{
	for (int i = 0; i < NQP; i++)
		if (qps[i].qp && qps[i].qp->qp_num == qpn)
			return qps[i].idx;
	return -1;
}

static void show_wc(const char *how, const struct ibv_wc *w)
{
	out("  %s wr_id %#llx status %d opcode %d qp %d imm %#x", how, (unsigned long long)w->wr_id, w->status, w->opcode,
	    qp_index_of(w->qp_num), (w->wc_flags & IBV_WC_WITH_IMM) ? w->imm_data : 0);
}

static void op_open(void)
{
	int i = PICK_LIVE(ctxs, NCTX, == NULL);
	if (i < 0)
		return;
	ctxs[i] = ibv_open_device(fake_device());
	out("open %d %s", i, ctxs[i] ? "ok" : strerror(errno));
	ctx_objs[i] = 0;
}

static void op_close(void)
{
	int i = live_ctx();
	if (i < 0 || ctx_objs[i])
		return;
	out("close %d %d", i, ibv_close_device(ctxs[i]));
	ctxs[i] = NULL;
}

static void op_pd(void)
{
	int c = live_ctx(), i = PICK_LIVE(pds, NPD, == NULL);
	if (c < 0 || i < 0)
		return;
	pds[i] = ibv_alloc_pd(ctxs[c]);
	out("pd %d ctx %d %s", i, c, pds[i] ? "ok" : strerror(errno));
	if (pds[i])
		pd_ctx[i] = c, pd_users[i] = 0, ctx_objs[c]++;
}

static void op_unpd(void)
{
	int i = PICK_LIVE(pds, NPD, != NULL);
	if (i < 0 || pd_users[i])
		return;
	out("unpd %d %d", i, ibv_dealloc_pd(pds[i]));
	ctx_objs[pd_ctx[i]]--;
	pds[i] = NULL;
}

static void op_mr(void)
{
	int p = PICK_LIVE(pds, NPD, != NULL), i = PICK_LIVE(mrs, NMR, == NULL);
	if (p < 0 || i < 0)
		return;
	int access = IBV_ACCESS_LOCAL_WRITE | (pick(2) ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0);
	size_t off = pick(1024), len = pick(8) ? 1 + pick(sizeof mem - 1024) : 0;
	int kind = pick(6);
	const char *what;
	mr_fd[i] = -1;
	switch (kind) {
	case 0:
		what = "odp";
		mrs[i] = ibv_reg_mr_iova2(pds[p], mem + off, len, (uintptr_t)(mem + off), access | IBV_ACCESS_ON_DEMAND);
		break;
	case 1:
		what = "implicit-odp";
		mrs[i] = ibv_reg_mr_iova2(pds[p], NULL, SIZE_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
		break;
	case 2:
		what = "dmabuf";
		mr_fd[i] = dup(2);
		mrs[i] = ibv_reg_dmabuf_mr(pds[p], off, len ? len : 4096, 0x7f0000000000ull + off, mr_fd[i], access);
		break;
	default:
		what = "plain";
		mrs[i] = ibv_reg_mr_iova2(pds[p], mem + off, len, (uintptr_t)(mem + off), access);
	}
	if (mrs[i]) {
		out("mr %d %s pd %d len %zu lkey %#x rkey %#x", i, what, p, mrs[i]->length, mrs[i]->lkey, mrs[i]->rkey);
		mr_pd[i] = p;
		pd_users[p]++;
	} else {
		out("mr %d %s pd %d: %s", i, what, p, strerror(errno));
		if (mr_fd[i] >= 0)
			close(mr_fd[i]);
	}
}

static void op_rereg(void)
{
	int i = PICK_LIVE(mrs, NMR, != NULL);
	if (i < 0 || mr_fd[i] >= 0)
		return;
	int flags = pick(2) ? IBV_REREG_MR_CHANGE_TRANSLATION : IBV_REREG_MR_CHANGE_ACCESS;
	size_t off = pick(1024), len = pick(6) ? 1 + pick(4096) : 0;
	int r = ibv_rereg_mr(mrs[i], flags, NULL, mem + off, len, IBV_ACCESS_LOCAL_WRITE);
	out("rereg %d flags %d: %d lkey %#x", i, flags, r, mrs[i]->lkey);
}

static void op_unmr(void)
{
	int i = PICK_LIVE(mrs, NMR, != NULL);
	if (i < 0)
		return;
	out("unmr %d %d", i, ibv_dereg_mr(mrs[i]));
	pd_users[mr_pd[i]]--;
	if (mr_fd[i] >= 0)
		close(mr_fd[i]);
	mrs[i] = NULL;
}

static void op_chan(void)
{
	int c = live_ctx(), i = PICK_LIVE(chans, NCH, == NULL);
	if (c < 0 || i < 0)
		return;
	chans[i] = ibv_create_comp_channel(ctxs[c]);
	out("chan %d ctx %d %s", i, c, chans[i] ? "ok" : strerror(errno));
	if (chans[i]) {
		chan_ctx[i] = c, chan_users[i] = 0, ctx_objs[c]++;
		fcntl(chans[i]->fd, F_SETFL, fcntl(chans[i]->fd, F_GETFL) | O_NONBLOCK);
	}
}

static void op_unchan(void)
{
	int i = PICK_LIVE(chans, NCH, != NULL);
	if (i < 0 || chan_users[i])
		return;
	out("unchan %d %d", i, ibv_destroy_comp_channel(chans[i]));
	ctx_objs[chan_ctx[i]]--;
	chans[i] = NULL;
}

static void op_cq(void)
{
	int c = live_ctx(), i = PICK_LIVE(cqs, NCQ, .cq == NULL);
	if (c < 0 || i < 0)
		return;
	int cqe = pick(10) ? 1 + pick(512) : (pick(2) ? 0 : 1 << 30);
	int ch = -1;
	if (pick(3) == 0) {
		int k = PICK_LIVE(chans, NCH, != NULL);
		if (k >= 0 && chan_ctx[k] == c)
			ch = k;
	}
	struct cq *q = &cqs[i];
	q->ex = NULL;
	if (pick(3) == 0) {
		struct ibv_cq_init_attr_ex a = {.cqe = cqe, .channel = ch >= 0 ? chans[ch] : NULL,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM};
		q->ex = ibv_create_cq_ex(ctxs[c], &a);
		q->cq = q->ex ? ibv_cq_ex_to_cq(q->ex) : NULL;
	} else {
		q->cq = ibv_create_cq(ctxs[c], cqe, NULL, ch >= 0 ? chans[ch] : NULL, 0);
	}
	if (!q->cq) {
		out("cq %d ctx %d cqe %d: %s", i, c, cqe, strerror(errno));
		return;
	}
	out("cq %d ctx %d cqe %d ex %d ch %d: cqe %d", i, c, cqe, q->ex != NULL, ch, q->cq->cqe);
	q->ctx = c, q->users = 0, q->ch = ch;
	ctx_objs[c]++;
	if (ch >= 0)
		chan_users[ch]++;
}

/* drain_events reads and acknowledges the events of CQ i waiting on its
 * channel: libibverbs's ibv_destroy_cq waits for every event reported to
 * be acknowledged. */
static void drain_events(int i)
{
	if (cqs[i].ch < 0)
		return;
	struct ibv_cq *cq;
	void *cq_ctx;
	int n = 0;
	while (ibv_get_cq_event(chans[cqs[i].ch], &cq, &cq_ctx) == 0)
		ibv_ack_cq_events(cq, 1), n++;
	out("drained %d: %d", i, n);
}

static void op_uncq(void)
{
	int i = PICK_LIVE(cqs, NCQ, .cq != NULL);
	if (i < 0 || cqs[i].users)
		return;
	drain_events(i);
	out("uncq %d %d", i, ibv_destroy_cq(cqs[i].cq));
	ctx_objs[cqs[i].ctx]--;
	if (cqs[i].ch >= 0)
		chan_users[cqs[i].ch]--;
	cqs[i].cq = NULL;
}

static void op_srq(void)
{
	int p = PICK_LIVE(pds, NPD, != NULL), i = PICK_LIVE(srqs, NSRQ, == NULL);
	if (p < 0 || i < 0)
		return;
	struct ibv_srq_init_attr a = {.attr = {.max_wr = pick(8) ? 1 + pick(256) : (pick(2) ? 0 : 1000), .max_sge = 1}};
	srqs[i] = ibv_create_srq(pds[p], &a);
	out("srq %d max_wr %u: %s", i, a.attr.max_wr, srqs[i] ? "ok" : strerror(errno));
	if (srqs[i])
		srq_pd[i] = p, srq_users[i] = 0, pd_users[p]++;
}

static void op_unsrq(void)
{
	int i = PICK_LIVE(srqs, NSRQ, != NULL);
	if (i < 0 || srq_users[i])
		return;
	out("unsrq %d %d", i, ibv_destroy_srq(srqs[i]));
	pd_users[srq_pd[i]]--;
	srqs[i] = NULL;
}

static void op_srq_recv(void)
{
	int i = PICK_LIVE(srqs, NSRQ, != NULL);
	if (i < 0)
		return;
	struct ibv_recv_wr wr[4];
	struct ibv_sge sge[4];
	int n = 1 + pick(4);
	for (int k = 0; k < n; k++) {
		sge[k] = (struct ibv_sge){.addr = (uintptr_t)(mem + pick(4096)), .length = pick(256), .lkey = any_lkey()};
		wr[k] = (struct ibv_recv_wr){.wr_id = pick(20) ? 0x20000000 + pick(1 << 20) : 0xbad, .sg_list = &sge[k],
			.num_sge = pick(2), .next = k + 1 < n ? &wr[k + 1] : NULL};
	}
	struct ibv_recv_wr *bad = NULL;
	int r = ibv_post_srq_recv(srqs[i], wr, &bad);
	out("srq_recv %d n %d: %d bad %d", i, n, r, bad ? (int)(bad - wr) : -1);
}

/* op_arrive: messages arrive on a QP of an SRQ, each taking the SRQ's
 * oldest receive into the QP's receive CQ */
static void op_arrive(void)
{
	int i = PICK_LIVE(qps, NQP, .srq >= 0 && qps[_i].qp != NULL);
	if (i < 0)
		return;
	out("arrive %d: %d", i, fake_srq_deliver(qps[i].qp, 1 + pick(4)));
}

static void op_qp(void)
{
	int p = PICK_LIVE(pds, NPD, != NULL), i = PICK_LIVE(qps, NQP, .qp == NULL);
	if (p < 0 || i < 0)
		return;
	int c = pd_ctx[p], s = -1, r = -1;
	for (int k = 0; k < NCQ; k++)
		if (cqs[k].cq && cqs[k].ctx == c && (s < 0 || pick(2)))
			s = k;
	for (int k = 0; k < NCQ; k++)
		if (cqs[k].cq && cqs[k].ctx == c && (r < 0 || pick(2)))
			r = k;
	if (s < 0)
		return;
	static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND};
	int q = -1; /* an SRQ of the QP's PD, for one RC QP in three */
	for (int k = 0; k < NSRQ; k++)
		if (srqs[k] && srq_pd[k] == p && (q < 0 || pick(2)))
			q = k;
	if (pick(3))
		q = -1;
	struct ibv_qp_init_attr a = {.send_cq = cqs[s].cq, .recv_cq = cqs[r].cq, .qp_type = q >= 0 ? IBV_QPT_RC : types[pick(6)],
		.srq = q >= 0 ? srqs[q] : NULL,
		.sq_sig_all = pick(4) == 0,
		.cap = {.max_send_wr = pick(10) ? 1 + pick(256) : (pick(2) ? 0 : 1u << 20), .max_recv_wr = 1 + pick(256),
			.max_send_sge = 1 + pick(4), .max_recv_sge = 1 + pick(4), .max_inline_data = pick(3) ? pick(512) : 0}};
	int ex = q < 0 && pick(4) == 0;
	if (ex) {
		struct ibv_qp_init_attr_ex ax = {.send_cq = a.send_cq, .recv_cq = a.recv_cq, .qp_type = a.qp_type,
			.sq_sig_all = a.sq_sig_all, .cap = a.cap, .pd = pds[p], .comp_mask = IBV_QP_INIT_ATTR_PD};
		if (pick(2)) {
			ax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
			ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | (pick(3) ? 0 : IBV_QP_EX_WITH_LOCAL_INV);
		}
		qps[i].qp = ibv_create_qp_ex(ctxs[c], &ax);
		a.cap = ax.cap;
	} else {
		qps[i].qp = ibv_create_qp(pds[p], &a);
	}
	if (!qps[i].qp) {
		out("qp %d type %d ex %d sq %u: %s", i, a.qp_type, ex, a.cap.max_send_wr, strerror(errno));
		return;
	}
	qps[i].idx = next_idx++;
	out("qp %d (#%d) type %d ex %d srq %d caps %u %u %u %u %u", i, qps[i].idx, a.qp_type, ex, q, a.cap.max_send_wr,
	    a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data);
	qps[i].ctx = c, qps[i].pd = p, qps[i].scq = s, qps[i].rcq = r, qps[i].srq = q;
	pd_users[p]++, cqs[s].users++, cqs[r].users++;
	if (q >= 0)
		srq_users[q]++;
}

static void op_unqp(void)
{
	int i = PICK_LIVE(qps, NQP, .qp != NULL);
	if (i < 0)
		return;
	out("unqp %d %d", i, ibv_destroy_qp(qps[i].qp));
	pd_users[qps[i].pd]--, cqs[qps[i].scq].users--, cqs[qps[i].rcq].users--;
	if (qps[i].srq >= 0)
		srq_users[qps[i].srq]--;
	qps[i].qp = NULL;
}

static void op_modify(void)
{
	int i = PICK_LIVE(qps, NQP, .qp != NULL);
	if (i < 0)
		return;
	static const enum ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
		IBV_QPS_SQD, IBV_QPS_SQE, IBV_QPS_ERR};
	struct ibv_qp_attr a = {.qp_state = states[pick(7)], .port_num = 1 + pick(2), .pkey_index = 0,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE, .path_mtu = IBV_MTU_1024, .dest_qp_num = 0x100 + pick(64),
		.rq_psn = pick(1 << 24), .sq_psn = pick(1 << 24), .max_dest_rd_atomic = 1, .max_rd_atomic = 1,
		.min_rnr_timer = 12, .timeout = pick(32), .retry_cnt = pick(8), .rnr_retry = pick(8),
		.ah_attr = {.dlid = pick(0x100), .port_num = 1 + pick(2), .is_global = pick(2)},
		.alt_ah_attr = {.dlid = pick(0x100), .port_num = 1 + pick(2)}, .alt_port_num = 1 + pick(2), .alt_timeout = 14};
	static const int masks[] = {
		IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
		IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER,
		IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
		IBV_QP_STATE,
		IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
		IBV_QP_ALT_PATH,
		IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH,
	};
	int mask = masks[pick(7)];
	a.path_mig_state = IBV_MIG_REARM;
	errno = 0;
	int r = ibv_modify_qp(qps[i].qp, &a, mask);
	out("modify %d to %d mask %#x: %d", i, a.qp_state, mask, r);
}

static void op_query(void)
{
	int i = PICK_LIVE(qps, NQP, .qp != NULL);
	if (i < 0)
		return;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int mask = pick(4) ? IBV_QP_CAP : IBV_QP_STATE;
	int r = ibv_query_qp(qps[i].qp, &a, mask, &ia);
	out("query %d mask %#x: %d sq %u", i, mask, r, r ? 0 : a.cap.max_send_wr);
}

static int any_lkey(void)
{
	int m = PICK_LIVE(mrs, NMR, != NULL);
	return m >= 0 ? (int)mrs[m]->lkey : (int)pick(1000);
}

static void op_post(void)
{
	int i = PICK_LIVE(qps, NQP, .qp != NULL);
	if (i < 0)
		return;
	static const enum ibv_wr_opcode ops[] = {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
		IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
		IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV};
	struct ibv_send_wr wr[4];
	struct ibv_sge sge[4][3];
	int n = 1 + pick(4);
	for (int k = 0; k < n; k++) {
		int nsge = pick(4);
		for (int s = 0; s < nsge; s++)
			sge[k][s] = (struct ibv_sge){.addr = (uintptr_t)(mem + pick(4096)), .length = pick(64), .lkey = any_lkey()};
		wr[k] = (struct ibv_send_wr){.wr_id = pick(20) ? 1 + pick(1 << 20) : 0xbad, .sg_list = sge[k], .num_sge = nsge,
			.opcode = ops[pick(9)], .send_flags = (pick(2) ? IBV_SEND_SIGNALED : 0) | (pick(4) ? 0 : IBV_SEND_INLINE),
			.imm_data = (uint32_t)next64(), .next = k + 1 < n ? &wr[k + 1] : NULL};
		wr[k].wr.rdma.remote_addr = next64() & 0xffffffffff, wr[k].wr.rdma.rkey = pick(1000);
	}
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(qps[i].qp, wr, &bad);
	out("post %d n %d: %d bad %d", i, n, r, bad ? (int)(bad - wr) : -1);
}

static void op_recv(void)
{
	int i = PICK_LIVE(qps, NQP, .qp != NULL);
	if (i < 0)
		return;
	struct ibv_recv_wr wr[3];
	struct ibv_sge sge[3];
	int n = 1 + pick(3);
	for (int k = 0; k < n; k++) {
		sge[k] = (struct ibv_sge){.addr = (uintptr_t)(mem + pick(4096)), .length = pick(256), .lkey = any_lkey()};
		wr[k] = (struct ibv_recv_wr){.wr_id = 0x10000000 + pick(1 << 20), .sg_list = &sge[k], .num_sge = pick(2),
			.next = k + 1 < n ? &wr[k + 1] : NULL};
	}
	struct ibv_recv_wr *bad = NULL;
	int r = ibv_post_recv(qps[i].qp, wr, &bad);
	out("recv %d n %d: %d bad %d", i, n, r, bad ? (int)(bad - wr) : -1);
}

static void op_poll(void)
{
	int i = PICK_LIVE(cqs, NCQ, .cq != NULL);
	if (i < 0)
		return;
	if (cqs[i].ex && pick(2)) {
		struct ibv_poll_cq_attr a = {0};
		int r = ibv_start_poll(cqs[i].ex, &a), k = 0;
		out("start_poll %d: %d", i, r);
		if (r == 0) {
			for (; r == 0 && k < 16; k++) {
				struct ibv_wc w = {.wr_id = cqs[i].ex->wr_id, .status = cqs[i].ex->status, .opcode = ibv_wc_read_opcode(cqs[i].ex),
					.qp_num = ibv_wc_read_qp_num(cqs[i].ex)};
				show_wc("ex", &w);
				r = ibv_next_poll(cqs[i].ex);
			}
			ibv_end_poll(cqs[i].ex);
			out("end_poll %d after %d: %d", i, k, r);
		}
		return;
	}
	struct ibv_wc wc[16];
	int n = 1 + pick(16);
	int r = ibv_poll_cq(cqs[i].cq, n, wc);
	out("poll %d n %d: %d", i, n, r);
	for (int k = 0; k < r; k++)
		show_wc("wc", &wc[k]);
}

static void op_notify(void)
{
	int i = PICK_LIVE(cqs, NCQ, .cq != NULL);
	if (i < 0)
		return;
	out("notify %d: %d", i, ibv_req_notify_cq(cqs[i].cq, pick(2)));
	if (cqs[i].ch >= 0) {
		struct ibv_cq *cq;
		void *cq_ctx;
		int r = ibv_get_cq_event(chans[cqs[i].ch], &cq, &cq_ctx);
		out("cq_event %d: %d %s", i, r, r ? strerror(errno) : (cq == cqs[i].cq ? "this cq" : "another cq"));
		if (r == 0)
			ibv_ack_cq_events(cq, 1);
	}
}

static void op_async(void)
{
	int c = live_ctx();
	if (c < 0)
		return;
	fcntl(ctxs[c]->async_fd, F_SETFL, fcntl(ctxs[c]->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ev;
	int r = ibv_get_async_event(ctxs[c], &ev);
	out("async %d: %d %s", c, r, r ? strerror(errno) : "event");
	if (r == 0)
		ibv_ack_async_event(&ev);
}

static void op_fork(void)
{
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		int n;
		struct ibv_device **l = ibv_get_device_list(&n);
		if (l)
			ibv_free_device_list(l);
		_exit(l ? 0 : 3);
	}
	int st = 0;
	waitpid(p, &st, 0);
	out("fork: %d", WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
}

static void op_dlopen(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW);
	if (!h) {
		out("dlopen: %s", dlerror());
		return;
	}
	const char *(*name)(struct ibv_device *) = (const char *(*)(struct ibv_device *))dlsym(h, "ibv_get_device_name");
	out("dlopen: %s", name ? name(fake_device()) : "no ibv_get_device_name");
	dlclose(h);
}

/* three threads, each posting to and polling its own QP */
struct thr {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	long sends, polled;
	uint64_t seed;
};
static void *thr_run(void *arg)
{
	struct thr *t = arg;
	uint64_t s = t->seed;
	for (int k = 0; k < 200; k++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		struct ibv_send_wr wr = {.wr_id = k, .opcode = IBV_WR_SEND, .send_flags = (s >> 40) & 1 ? IBV_SEND_SIGNALED : 0}, *bad;
		if (ibv_post_send(t->qp, &wr, &bad) == 0)
			t->sends++;
		struct ibv_wc wc[4];
		int n = ibv_poll_cq(t->cq, 4, wc);
		for (int j = 0; j < n; j++)
			t->polled += wc[j].wr_id + 1;
	}
	struct ibv_wc wc[16];
	int n;
	while ((n = ibv_poll_cq(t->cq, 16, wc)) > 0)
		for (int j = 0; j < n; j++)
			t->polled += wc[j].wr_id + 1;
	return NULL;
}

static void op_threads(void)
{
	int c = live_ctx();
	if (c < 0)
		return;
	struct ibv_pd *pd = ibv_alloc_pd(ctxs[c]);
	struct thr t[3] = {{0}};
	pthread_t th[3];
	for (int k = 0; k < 3; k++) {
		t[k].cq = ibv_create_cq(ctxs[c], 512, NULL, NULL, 0);
		struct ibv_qp_init_attr a = {.send_cq = t[k].cq, .recv_cq = t[k].cq, .qp_type = IBV_QPT_RC,
			.cap = {.max_send_wr = 256, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
		t[k].qp = ibv_create_qp(pd, &a);
		t[k].seed = next64();
	}
	for (int k = 0; k < 3; k++)
		pthread_create(&th[k], NULL, thr_run, &t[k]);
	for (int k = 0; k < 3; k++)
		pthread_join(th[k], NULL);
	for (int k = 0; k < 3; k++) {
		out("thread %d: sends %ld polled %ld", k, t[k].sends, t[k].polled);
		out("thread %d: %d %d", k, ibv_destroy_qp(t[k].qp), ibv_destroy_cq(t[k].cq));
	}
	ibv_dealloc_pd(pd);
}

static void teardown(void)
{
	for (int i = 0; i < NQP; i++)
		if (qps[i].qp)
			out("end unqp %d %d", i, ibv_destroy_qp(qps[i].qp)), qps[i].qp = NULL;
	for (int i = 0; i < NSRQ; i++)
		if (srqs[i])
			out("end unsrq %d %d", i, ibv_destroy_srq(srqs[i])), srqs[i] = NULL;
	for (int i = 0; i < NMR; i++)
		if (mrs[i]) {
			out("end unmr %d %d", i, ibv_dereg_mr(mrs[i]));
			if (mr_fd[i] >= 0)
				close(mr_fd[i]);
			mrs[i] = NULL;
		}
	for (int i = 0; i < NCQ; i++)
		if (cqs[i].cq) {
			drain_events(i);
			out("end uncq %d %d", i, ibv_destroy_cq(cqs[i].cq)), cqs[i].cq = NULL;
		}
	for (int i = 0; i < NCH; i++)
		if (chans[i])
			out("end unchan %d %d", i, ibv_destroy_comp_channel(chans[i])), chans[i] = NULL;
	for (int i = 0; i < NPD; i++)
		if (pds[i])
			out("end unpd %d %d", i, ibv_dealloc_pd(pds[i])), pds[i] = NULL;
	for (int i = 0; i < NCTX; i++)
		if (ctxs[i])
			out("end close %d %d", i, ibv_close_device(ctxs[i])), ctxs[i] = NULL;
}

static void program(uint64_t seed, long p)
{
	rng = seed ^ (0x5851f42d4c957f2dull * (uint64_t)(p + 1));
	hash = 0xcbf29ce484222325ull;
	nops = 0;
	next_idx = 0;
	memset(cqs, 0, sizeof cqs);
	memset(qps, 0, sizeof qps);
	static void (*const steps[])(void) = {op_open, op_open, op_close, op_pd, op_pd, op_unpd, op_mr, op_mr, op_rereg, op_unmr,
		op_chan, op_unchan, op_cq, op_cq, op_uncq, op_qp, op_qp, op_qp, op_unqp, op_modify, op_modify, op_modify,
		op_query, op_post, op_post, op_post, op_recv, op_recv, op_poll, op_poll, op_poll, op_notify, op_async,
		op_srq, op_unsrq, op_srq_recv, op_srq_recv, op_arrive};
	int n = 10 + pick(50);
	for (int k = 0; k < n; k++) {
		unsigned r = pick(1000);
		if (r == 0)
			op_fork();
		else if (r == 1)
			op_dlopen();
		else if (r < 5)
			op_threads();
		else
			steps[pick(sizeof steps / sizeof steps[0])]();
	}
	teardown();
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: verbfuzz SEED N [P]\n");
		return 2;
	}
	uint64_t seed = strtoull(argv[1], NULL, 0);
	long n = atol(argv[2]);
	if (argc > 3) {
		verbose = 1;
		long p = atol(argv[3]);
		program(seed, p);
		printf("%ld %ld %016llx\n", p, nops, (unsigned long long)hash);
		return 0;
	}
	for (long p = 0; p < n; p++) {
		program(seed, p);
		printf("%ld %ld %016llx\n", p, nops, (unsigned long long)hash);
	}
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "VmRSS:", 6))
			printf("rss %ld\n", atol(line + 6));
	if (f)
		fclose(f);
	return 0;
}
