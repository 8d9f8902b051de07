/* Checks the shim's ibv_wr_* functions (wrapi.c) against a provider stub
 * that keeps what each batch gave it:
 *   wrapi_check test
 *   wrapi_check bench [N]  ns per one-WR batch (RDMA WRITE, one SGE):
 *                          the provider's functions called directly vs
 *                          the shim's
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. wrapi_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"
#include "check.h"

/* ---- the provider stub ---- */

struct rec {
	char op;                /* W write, I write with imm, R read, S send, M send with imm, C cmp&swp, F fetch&add */
	uint64_t wr_id;
	unsigned flags;
	uint32_t rkey, imm;
	uint64_t raddr, a1, a2;
	int nsge;
	struct ibv_sge sge[4];
	int inl;                /* inline bytes given */
	uint8_t data[64];
};

static struct rec pending[64], posted[16384];
static int npending, nposted, starts, completes;
static int complete_ret;       /* what the next wr_complete returns */

static struct rec *op(struct ibv_qp_ex *x, char c)
{
	struct rec *r = &pending[npending++ % 64];
	memset(r, 0, sizeof(*r));
	r->op = c, r->wr_id = x->wr_id, r->flags = x->wr_flags;
	return r;
}

static void p_start(struct ibv_qp_ex *x) { npending = 0, starts++; }
static int p_complete(struct ibv_qp_ex *x)
{
	completes++;
	int ret = complete_ret;
	complete_ret = 0;
	if (!ret)
		for (int i = 0; i < npending; i++)
			posted[nposted++ % 16384] = pending[i];
	npending = 0;
	return ret;
}
static void p_abort(struct ibv_qp_ex *x) { npending = 0; }
static void p_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t a) { struct rec *r = op(x, 'W'); r->rkey = rkey, r->raddr = a; }
static void p_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t a, __be32 imm) { struct rec *r = op(x, 'I'); r->rkey = rkey, r->raddr = a, r->imm = imm; }
static void p_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t a) { struct rec *r = op(x, 'R'); r->rkey = rkey, r->raddr = a; }
static void p_send(struct ibv_qp_ex *x) { op(x, 'S'); }
static void p_send_imm(struct ibv_qp_ex *x, __be32 imm) { op(x, 'M')->imm = imm; }
static void p_cas(struct ibv_qp_ex *x, uint32_t rkey, uint64_t a, uint64_t c, uint64_t s) { struct rec *r = op(x, 'C'); r->rkey = rkey, r->raddr = a, r->a1 = c, r->a2 = s; }
static void p_faa(struct ibv_qp_ex *x, uint32_t rkey, uint64_t a, uint64_t v) { struct rec *r = op(x, 'F'); r->rkey = rkey, r->raddr = a, r->a1 = v; }
static void p_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t a, uint32_t len) { abort(); /* the shim issues lists */ }
static void p_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *s)
{
	struct rec *r = &pending[(npending - 1) % 64];
	r->nsge = (int)n;
	memcpy(r->sge, s, n * sizeof(*s));
}
static void p_inline(struct ibv_qp_ex *x, void *a, size_t len)
{
	struct rec *r = &pending[(npending - 1) % 64];
	r->inl = (int)len;
	memcpy(r->data, a, len);
}

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) { return 0; }
static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }

/* ---- layer 2 stand-in: the chain a diverted batch posts ---- */

static int hook_sends, hook_n, hook_inline_ok;
static uint64_t hook_wrids[8];
static enum ibv_wr_opcode hook_ops[8];
static struct lip_qp *q;
static int hook_home; /* layer 2 gives the QP back as the batch reaches it: LIP_HOME */

static int hook_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	hook_sends++;
	hook_n = 0;
	for (; wr && hook_n < 8; wr = wr->next, hook_n++) {
		hook_wrids[hook_n] = wr->wr_id;
		hook_ops[hook_n] = wr->opcode;
		if ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge == 1 && wr->sg_list[0].length == 5 &&
		    memcmp((void *)(uintptr_t)wr->sg_list[0].addr, "hello", 5) == 0)
			hook_inline_ok = 1;
	}
	if (hook_home) {
		CHECK(lip_undivert(q, NULL, NULL, 0, 0) == 0, "the hook's undivert");
		return LIP_HOME;
	}
	return 0;
}
static int hook_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int hook_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }
static void hook_intercept(struct ibv_cq *cq, struct ibv_wc *wc, int n) {}
static void hook_surfaced(struct ibv_qp *qp, struct ibv_wc *wc) {}
struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept, hook_surfaced};

/* ---- the application's QP ---- */

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct ibv_qp_ex qpx;

static void setup(void)
{
	ctx.ops.post_send = stub_post_send;
	ctx.ops.post_recv = stub_post_recv;
	ctx.ops.poll_cq = stub_poll_cq;
	cq.context = &ctx;
	qpx.qp_base.context = &ctx;
	qpx.qp_base.qp_num = 0x77;
	qpx.qp_base.send_cq = qpx.qp_base.recv_cq = &cq;
	qpx.wr_start = p_start, qpx.wr_complete = p_complete, qpx.wr_abort = p_abort;
	qpx.wr_rdma_write = p_write, qpx.wr_rdma_write_imm = p_write_imm, qpx.wr_rdma_read = p_read;
	qpx.wr_send = p_send, qpx.wr_send_imm = p_send_imm;
	qpx.wr_atomic_cmp_swp = p_cas, qpx.wr_atomic_fetch_add = p_faa;
	qpx.wr_set_sge = p_sge, qpx.wr_set_sge_list = p_sge_list, qpx.wr_set_inline_data = p_inline;
	struct ibv_qp_init_attr a = {.send_cq = &cq, .recv_cq = &cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_inline_data = 16}};
	if (!lip_ctx_add(&ctx) || !(q = lip_qp_add(&qpx.qp_base, &a)) || lip_wr_attach(q, &qpx, &a.cap)) {
		fprintf(stderr, "setup failed\n");
		exit(2);
	}
}

static uint64_t outstanding(void)
{
	uint64_t s, r;
	lip_qp_outstanding(q, &s, &r);
	return s;
}

static void check_follows(void)
{
	CHECK(lip_wr_follows(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD), "followed ops");
	CHECK(!lip_wr_follows(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV), "local invalidate is not followed");
	CHECK(!lip_wr_follows(IBV_QP_EX_WITH_BIND_MW) && !lip_wr_follows(IBV_QP_EX_WITH_SEND_WITH_INV), "memory windows, SEND with invalidate");
	CHECK(qpx.wr_start != p_start && qpx.wr_rdma_write != p_write && qpx.wr_set_sge != p_sge, "the QP's functions are the shim's");
}

/* a batch reaches the provider at wr_complete, whole, as the application
 * described it, and the ring records it (inline bytes copied when set) */
static void check_batch(void)
{
	char msg[8] = "hello";
	struct ibv_sge two[2] = {{.addr = 0x3000, .length = 16, .lkey = 0x31}, {.addr = 0x4000, .length = 32, .lkey = 0x41}};
	ibv_wr_start(&qpx);
	qpx.wr_id = 1, qpx.wr_flags = 0;
	ibv_wr_rdma_write(&qpx, 0xa1, 0x9000);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 64);
	qpx.wr_id = 2, qpx.wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(&qpx, 0x12345678);
	ibv_wr_set_inline_data(&qpx, msg, 5);
	memcpy(msg, "XXXXX", 5); /* the application may reuse it at once */
	qpx.wr_id = 3, qpx.wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	ibv_wr_rdma_read(&qpx, 0xa2, 0x9100);
	ibv_wr_set_sge_list(&qpx, 2, two);
	CHECK(npending == 0 && starts == 0, "nothing reaches the provider before wr_complete");
	CHECK(ibv_wr_complete(&qpx) == 0, "complete");
	CHECK(starts == 1 && completes == 1 && nposted == 3, "provider: starts %d completes %d posted %d", starts, completes, nposted);
	struct rec *r = posted;
	CHECK(r[0].op == 'W' && r[0].wr_id == 1 && r[0].flags == 0 && r[0].rkey == 0xa1 && r[0].raddr == 0x9000 && r[0].nsge == 1 &&
	      r[0].sge[0].lkey == 0x11 && r[0].sge[0].length == 64, "write: %c %lu", r[0].op, (unsigned long)r[0].wr_id);
	CHECK(r[1].op == 'M' && r[1].wr_id == 2 && r[1].flags == IBV_SEND_SIGNALED && r[1].imm == 0x12345678 && r[1].inl == 5 &&
	      memcmp(r[1].data, "hello", 5) == 0, "send with imm, inline: %c flags %#x inl %d", r[1].op, r[1].flags, r[1].inl);
	CHECK(r[2].op == 'R' && r[2].flags == (IBV_SEND_SIGNALED | IBV_SEND_FENCE) && r[2].nsge == 2 && r[2].sge[1].lkey == 0x41,
	      "read with two SGEs: %c nsge %d", r[2].op, r[2].nsge);
	CHECK(outstanding() == 3, "ring: %lu outstanding", (unsigned long)outstanding());
	struct lip_sqe *e = &q->sq[1];
	CHECK(e->wr_id == 2 && e->opcode == IBV_WR_SEND_WITH_IMM && (e->send_flags & IBV_SEND_INLINE) && e->inline_len == 5 &&
	      memcmp(q->inl + 1 * q->inl_max, "hello", 5) == 0 && e->imm == 0x12345678, "ring entry of the inline send");
	CHECK(q->sq[2].opcode == IBV_WR_RDMA_READ && q->sq[2].num_sge == 2 && q->sq[2].sge[1].addr == 0x4000, "ring entry of the read");
}

/* what the provider refuses, what the application aborts, and what the
 * batch cannot carry reach neither the provider nor (live) the ring */
static void check_refusals(void)
{
	uint64_t before = outstanding();
	int posted0 = nposted;
	ibv_wr_start(&qpx);
	qpx.wr_id = 10, qpx.wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(&qpx);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	complete_ret = ENOMEM;
	CHECK(ibv_wr_complete(&qpx) == ENOMEM, "the provider's refusal reaches the application");
	uint64_t h = q->shead;
	CHECK(h == q->stail + before + 1 && (q->sq[(h - 1) & q->smask].flags & LIP_SQE_VOID), "the refused WR is void in the ring");

	ibv_wr_start(&qpx);
	qpx.wr_id = 11;
	ibv_wr_send(&qpx);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	ibv_wr_abort(&qpx);
	CHECK(nposted == posted0 && q->shead == h, "an aborted batch is posted nowhere");

	char big[32] = {0};
	ibv_wr_start(&qpx);
	qpx.wr_id = 12;
	ibv_wr_send(&qpx);
	ibv_wr_set_inline_data(&qpx, big, sizeof(big));
	CHECK(ibv_wr_complete(&qpx) == EINVAL && nposted == posted0 && q->shead == h, "more inline bytes than granted: EINVAL");

	ibv_wr_start(&qpx);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	CHECK(ibv_wr_complete(&qpx) == EINVAL && q->shead == h, "an SGE before any WR: EINVAL");

	struct ibv_sge three[3] = {{0}};
	ibv_wr_start(&qpx);
	ibv_wr_send(&qpx);
	ibv_wr_set_sge_list(&qpx, 3, three);
	CHECK(ibv_wr_complete(&qpx) == EINVAL && q->shead == h, "more SGEs than granted: EINVAL");

	ibv_wr_start(&qpx);
	for (int i = 0; i < 17; i++) {
		ibv_wr_send(&qpx);
		ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	}
	CHECK(ibv_wr_complete(&qpx) == ENOMEM && q->shead == h, "more WRs than the send queue holds: ENOMEM");
	ibv_wr_start(&qpx);
	CHECK(ibv_wr_complete(&qpx) == 0 && q->shead == h, "an empty batch");
}

struct poster {
	int id, n;
};

static void *post_batches(void *p)
{
	struct poster *ps = p;
	for (int k = 0; k < ps->n; k++) {
		ibv_wr_start(&qpx);
		for (int j = 0; j < 2; j++) {
			qpx.wr_id = (uint64_t)ps->id << 32 | (uint64_t)(2 * k + j);
			qpx.wr_flags = 0;
			ibv_wr_rdma_write(&qpx, 0xa1, 0x9000);
			ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
			sched_yield(); /* widen the window another poster could use */
		}
		if (ibv_wr_complete(&qpx))
			abort();
	}
	return NULL;
}

/* two threads posting batches to one QP: each batch whole and in order,
 * in the ring as at the provider */
static void check_threads(void)
{
	if (lip_single_poster)
		return; /* one poster per QP by contract: no lock to check */
	nposted = 0;
	q->stail = q->shead; /* retire everything so far */
	uint64_t first = q->shead;
	struct poster a = {1, 2000}, b = {2, 2000};
	pthread_t ta, tb;
	pthread_create(&ta, NULL, post_batches, &a);
	pthread_create(&tb, NULL, post_batches, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	CHECK(nposted == 8000, "posted %d, want 8000", nposted);
	int bad = 0;
	for (int i = 0; i + 1 < nposted; i += 2)
		if (posted[i + 1].wr_id != posted[i].wr_id + 1)
			bad++;
	CHECK(bad == 0, "%d batches interleaved", bad);
	int mism = 0;
	for (int i = 0; i < 8000 && i <= (int)q->smask; i++) {
		uint64_t k = q->shead - 1 - (uint64_t)i;
		if (q->sq[k & q->smask].wr_id != posted[7999 - i].wr_id)
			mism++;
	}
	CHECK(mism == 0 && q->shead - first == 8000, "ring order differs from the provider's in %d places", mism);
	q->stail = q->shead;
}

static volatile int diverted_done, old_post_done;

static void *do_divert(void *p)
{
	CHECK(lip_divert(q) == 0, "divert");
	diverted_done = 1;
	return NULL;
}

static void *old_post(void *p)
{
	struct ibv_sge s = {.addr = 0x1000, .length = 8, .lkey = 0x11};
	struct ibv_send_wr w = {.wr_id = 30, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK(ibv_post_send(&qpx.qp_base, &w, &bad) == 0, "a post waiting for the batch");
	old_post_done = 1;
	return NULL;
}

/* A batch holds the queue's lock from wr_start; a post to the QP through
 * ibv_post_send waits for it. Layer 2 diverting the QP meanwhile must not
 * wait for that post (the application may poll a diverted CQ, through
 * layer 2, before it completes the batch): the post waits outside the
 * hot path's section. */
static void check_divert_during_batch(void)
{
	if (lip_single_poster) {
		/* one poster per QP by contract: no second poster to wait */
		CHECK(lip_divert(q) == 0, "divert");
		return;
	}
	ibv_wr_start(&qpx);
	pthread_t b, d;
	pthread_create(&b, NULL, old_post, NULL);
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_create(&d, NULL, do_divert, NULL);
	for (int i = 0; i < 200 && !diverted_done; i++)
		nanosleep(&ts, NULL); /* up to 10 s */
	CHECK(diverted_done, "the divert waited for a post waiting for the batch's lock");
	CHECK(!old_post_done, "the post went past the batch's lock");
	qpx.wr_id = 31, qpx.wr_flags = 0;
	ibv_wr_send(&qpx);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	CHECK(ibv_wr_complete(&qpx) == 0, "the batch, diverted");
	pthread_join(d, NULL);
	pthread_join(b, NULL);
	CHECK(hook_sends == 2, "layer 2 got %d posts, want the batch and the post", hook_sends);
	hook_sends = 0;
}

/* a diverted QP's batch goes to layer 2 as one ibv_post_send chain */
static void check_diverted(void)
{
	int posted0 = nposted;
	ibv_wr_start(&qpx);
	qpx.wr_id = 21, qpx.wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(&qpx, 0xa1, 0x9000, 7);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	qpx.wr_id = 22;
	char msg[8] = "hello";
	ibv_wr_send(&qpx);
	ibv_wr_set_inline_data(&qpx, msg, 5);
	CHECK(ibv_wr_complete(&qpx) == 0, "complete");
	CHECK(hook_sends == 1 && hook_n == 2 && hook_wrids[0] == 21 && hook_ops[0] == IBV_WR_RDMA_WRITE_WITH_IMM && hook_wrids[1] == 22 &&
	      hook_ops[1] == IBV_WR_SEND && hook_inline_ok, "layer 2 got %d chain(s) of %d", hook_sends, hook_n);
	CHECK(nposted == posted0, "the default QP's provider got nothing");
	ibv_wr_start(&qpx); /* the queue's lock was released */
	ibv_wr_abort(&qpx);
}

/* a diverted QP's batch that layer 2 hands back (LIP_HOME) is issued
 * through the provider's ibv_wr_* functions once, recorded, and the
 * queue's lock released */
static void check_home(void)
{
	int posted0 = nposted, starts0 = starts;
	hook_sends = 0;
	hook_home = 1;
	uint64_t h = q->shead;
	char msg[8] = "hello";
	ibv_wr_start(&qpx);
	qpx.wr_id = 41, qpx.wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(&qpx, 0xa1, 0x9000);
	ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
	qpx.wr_id = 42, qpx.wr_flags = 0;
	ibv_wr_send(&qpx);
	ibv_wr_set_inline_data(&qpx, msg, 5);
	CHECK(ibv_wr_complete(&qpx) == 0, "complete");
	hook_home = 0;
	CHECK(hook_sends == 1 && !q->diverted, "layer 2 got %d chain(s), diverted %d", hook_sends, q->diverted);
	CHECK(starts == starts0 + 1 && nposted == posted0 + 2 && posted[posted0].wr_id == 41 && posted[posted0].op == 'W' &&
	      posted[posted0 + 1].wr_id == 42 && posted[posted0 + 1].inl == 5 && memcmp(posted[posted0 + 1].data, "hello", 5) == 0,
	      "the provider's functions got %d WRs in %d batches", nposted - posted0, starts - starts0);
	CHECK(q->shead == h + 2 && q->sq[h & q->smask].wr_id == 41 && q->sq[(h + 1) & q->smask].inline_len == 5,
	      "the ring recorded %lu", (unsigned long)(q->shead - h));
	ibv_wr_start(&qpx); /* the queue's lock was released */
	ibv_wr_abort(&qpx);
}


/* bench: best of rounds, direct and shim alternating; the ring is
 * retired as it goes (a completion per batch, as a signaled WRITE). */
static int bench(long n, int rounds)
{
	setup();
	struct ibv_sge s = {.addr = 0x1000, .length = 64, .lkey = 0x11};
	double best[2] = {1e18, 1e18};
	for (int r = 0; r < rounds; r++) {
		for (int mode = 0; mode < 2; mode++) {
			double t0 = now_ns();
			for (long i = 0; i < n; i++) {
				qpx.wr_id = (uint64_t)i, qpx.wr_flags = IBV_SEND_SIGNALED;
				if (mode) {
					ibv_wr_start(&qpx);
					ibv_wr_rdma_write(&qpx, 0xa1, 0x9000);
					ibv_wr_set_sge(&qpx, 0x11, 0x1000, 64);
					ibv_wr_complete(&qpx);
					q->stail = q->shead;
				} else {
					p_start(&qpx);
					p_write(&qpx, 0xa1, 0x9000);
					p_sge_list(&qpx, 1, &s);
					p_complete(&qpx);
				}
			}
			double t = (now_ns() - t0) / n;
			if (t < best[mode])
				best[mode] = t;
		}
	}
	printf("wr_batch direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0], best[1], best[1] - best[0]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "bench") == 0)
		return bench(argc > 2 ? atol(argv[2]) : 1000000, argc > 3 ? atoi(argv[3]) : 5);
	if (argc < 2 || strcmp(argv[1], "test")) {
		fprintf(stderr, "usage: wrapi_check test | bench [N [rounds]]\n");
		return 2;
	}
	alarm(20); /* a lock left held would hang */
	if (getenv("IBPATH_SINGLE_POSTER") && strcmp(getenv("IBPATH_SINGLE_POSTER"), "1") == 0)
		lip_single_poster = 1;
	setup();
	check_follows();
	check_batch();
	check_refusals();
	check_threads();
	check_divert_during_batch();
	check_diverted();
	check_home();
	if (fails) {
		printf("%d checks failed\n", fails);
		return 1;
	}
	printf("ok\n");
	return 0;
}
