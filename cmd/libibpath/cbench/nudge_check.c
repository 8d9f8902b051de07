/* Checks layer 1's nudge in the hot path (nudge.c): which QPs get the
 * send slot, when a nudge is posted and when not, that it is never
 * recorded in the shadow ring, and that its flush reaches neither the
 * application nor layer 2, against a provider stub, without libibverbs
 * or a device:
 *   nudge_check test
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. nudge_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"
#include "check.h"

/* ---- the provider: a send queue that holds what it is given until the
 * test completes it (done) or fails the QP (flush) ---- */

#define DEPTH 256
static struct ibv_send_wr given[DEPTH]; /* the WRs the send queue holds, oldest first */
static int ngiven, nposted;
static int refuse;                      /* the next post is refused with this errno */
static struct ibv_wc cqe[DEPTH];
static unsigned chead, ctail;

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (refuse) {
			int r = refuse;
			refuse = 0;
			*bad = wr;
			return r;
		}
		given[ngiven++] = *wr;
		nposted++;
	}
	return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int i = 0;
	for (; i < n && ctail != chead; i++)
		wc[i] = cqe[ctail++ % DEPTH];
	return i;
}

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct ibv_qp qp, plain;

/* done completes the oldest k WRs the send queue holds, as a device does:
 * a completion for each signaled one (an unsignaled WR completes
 * silently with the next signaled one). */
static void done(int k)
{
	for (int i = 0; i < k; i++)
		if (given[i].send_flags & IBV_SEND_SIGNALED)
			cqe[chead++ % DEPTH] = (struct ibv_wc){.wr_id = given[i].wr_id, .qp_num = qp.qp_num, .opcode = IBV_WC_RDMA_WRITE};
	memmove(given, given + k, (size_t)(ngiven - k) * sizeof(*given));
	ngiven -= k;
}

/* flush fails the QP: the oldest WR gets the error, every other one a
 * flush, signaled or not (IBA 10.8.3: WRs completed in error always
 * make a completion). */
static void flush(void)
{
	for (int i = 0; i < ngiven; i++)
		cqe[chead++ % DEPTH] = (struct ibv_wc){.wr_id = given[i].wr_id, .qp_num = qp.qp_num,
			.status = i == 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR};
	ngiven = 0;
}

/* layer 2 stand-ins */
static int hook_batch, hook_calls;
static uint64_t hook_wrids[DEPTH];
static int hook_post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad) { return 0; }
static int hook_post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int hook_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc) { return 0; }
static void hook_intercept(struct ibv_cq *c, struct ibv_wc *wc, int n)
{
	hook_calls++;
	hook_batch = n;
	for (int i = 0; i < n && i < DEPTH; i++)
		hook_wrids[i] = wc[i].wr_id;
	lip_divert(lip_qp_find(lip_ctx_of(c->context), wc[0].qp_num));
}
struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept};

static int post(uint64_t id, int signaled)
{
	struct ibv_send_wr w = {.wr_id = id, .opcode = IBV_WR_RDMA_WRITE, .send_flags = signaled ? IBV_SEND_SIGNALED : 0}, *bad;
	return ctx.ops.post_send(&qp, &w, &bad);
}

static int poll_all(struct ibv_wc *wc, int n)
{
	int got = 0, k;
	while (got < n && (k = ctx.ops.poll_cq(&cq, n - got, wc + got)) > 0)
		got += k;
	return got;
}

static int has_nudge(const struct ibv_wc *wc, int n)
{
	for (int i = 0; i < n; i++)
		if (wc[i].wr_id == LIP_NUDGE_WRID)
			return 1;
	return 0;
}

static void test_pad(struct lip_ctx *c)
{
	struct ibv_qp_init_attr rc = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 16}};
	CHECK(!lip_nudge_pad(c, &rc), "a context without the nudge pads a QP");
	CHECK(!lip_nudge_pad(NULL, &rc), "no context: padded");
	lip_ctx_nudge(c, 1);
	CHECK(lip_nudge_pad(c, &rc), "an RC QP on a context with the nudge gets no slot");
	struct ibv_qp_init_attr a = rc;
	a.sq_sig_all = 1;
	CHECK(!lip_nudge_pad(c, &a), "sq_sig_all: every nudge would add a completion to the application's CQ");
	a = rc;
	a.qp_type = IBV_QPT_UD;
	CHECK(!lip_nudge_pad(c, &a), "a UD QP gets the slot");
	a = rc;
	a.srq = (struct ibv_srq *)&a;
	CHECK(!lip_nudge_pad(c, &a), "a QP on an SRQ (not protected) gets the slot");
	a = rc;
	a.cap.max_send_wr = UINT32_MAX;
	CHECK(!lip_nudge_pad(c, &a), "a send queue that cannot grow gets the slot");
	lip_single_poster = 1;
	CHECK(!lip_nudge_pad(c, &rc), "a single poster (no send queue lock) gets the slot");
	lip_single_poster = 0;
}

static void test(void)
{
	ctx.ops.post_send = stub_post_send;
	ctx.ops.post_recv = stub_post_recv;
	ctx.ops.poll_cq = stub_poll_cq;
	cq.context = &ctx;
	qp.context = plain.context = &ctx;
	qp.qp_num = 0x2a1;
	plain.qp_num = 0x2a2;
	qp.send_cq = qp.recv_cq = plain.send_cq = plain.recv_cq = &cq;
	struct lip_ctx *c = lip_ctx_add(&ctx);
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 16, .max_recv_wr = 16}};
	struct lip_qp *q = c ? lip_qp_add(&qp, &a) : NULL;
	struct lip_qp *p = c ? lip_qp_add(&plain, &a) : NULL;
	if (!q || !p) {
		printf("FAIL setup\n");
		exit(2);
	}
	test_pad(c);
	lip_nudge_created(q, 1);
	CHECK(lip_nudge(p) == ENOSPC, "a QP created without the slot was nudged");

	/* Not before one of its send completions went through the hot
	 * path's polls (a CQ polled with ibv_start_poll never shows it). */
	CHECK(post(1, 1) == 0, "post 1");
	CHECK(lip_nudge(q) == ENOTSUP, "nudged before any of its completions was polled through the shim");
	done(1);
	struct ibv_wc wc[32];
	CHECK(poll_all(wc, 32) == 1 && wc[0].wr_id == 1, "wr 1's completion");

	/* Nothing in flight: the application's next post moves the peer. */
	CHECK(lip_nudge(q) == ENODATA, "nudged a QP with nothing in flight");
	CHECK(nposted == 1, "the provider got %d WRs (want 1)", nposted);

	/* WRs in flight: the nudge goes out, after them, and is not recorded. */
	CHECK(post(2, 0) == 0 && post(3, 1) == 0, "post 2, 3");
	uint64_t head0 = q->shead;
	CHECK(lip_nudge(q) == 0, "no nudge with WRs in flight");
	struct ibv_send_wr *n = &given[ngiven - 1];
	CHECK(ngiven == 3 && n->wr_id == LIP_NUDGE_WRID && n->opcode == IBV_WR_RDMA_WRITE && n->num_sge == 0 &&
	      !(n->send_flags & IBV_SEND_SIGNALED) && n->wr.rdma.rkey == 0,
	      "the provider's last WR: wr_id %#lx opcode %d num_sge %d flags %#x (want the nudge: a zero-length WRITE, unsignaled)",
	      (unsigned long)n->wr_id, n->opcode, n->num_sge, n->send_flags);
	CHECK(q->shead == head0, "the nudge was recorded in the shadow ring (head %lu, was %lu)", (unsigned long)q->shead,
	      (unsigned long)head0);
	CHECK(lip_nudge(q) == EALREADY, "a second nudge while the first is out (it holds the one slot)");

	/* Its slot is free once a signaled WR posted after it completed. */
	done(3); /* 2, 3 and the nudge */
	CHECK(poll_all(wc, 32) == 1 && wc[0].wr_id == 3, "wr 3's completion");
	CHECK(lip_nudge(q) == EALREADY, "wr 3 came before the nudge: its completion does not free the nudge's slot");
	CHECK(post(4, 1) == 0, "post 4");
	done(1);
	CHECK(poll_all(wc, 32) == 1 && wc[0].wr_id == 4, "wr 4's completion");
	CHECK(q->nudge_mark == 0, "the nudge is still out after wr 4, posted after it, completed");

	/* The QP fails while a nudge is out: its flush reaches no one. */
	CHECK(post(5, 0) == 0 && post(6, 1) == 0 && lip_nudge(q) == 0 && post(7, 1) == 0, "post 5, 6, nudge, 7");
	flush();
	int got = poll_all(wc, 32);
	CHECK(got == 3 && !has_nudge(wc, got) && wc[0].wr_id == 5 && wc[1].wr_id == 6 && wc[2].wr_id == 7,
	      "the application got %d completions (want 5, 6, 7 and not the nudge's flush)", got);
	CHECK(q->nudge_mark == 0, "the nudge's flush did not clear its mark");

	/* Armed: the error goes to layer 2 with its batch, the nudge's flush
	 * not among it; what came before reaches the application. */
	lip_qp_arm(q, 1);
	CHECK(post(8, 1) == 0 && post(9, 1) == 0 && lip_nudge(q) == 0 && post(10, 1) == 0, "post 8, 9, nudge, 10");
	done(1);
	flush();
	got = poll_all(wc, 32);
	CHECK(got == 1 && wc[0].wr_id == 8, "the application got %d completions before the error (want wr 8)", got);
	CHECK(hook_calls == 1 && hook_batch == 2 && hook_wrids[0] == 9 && hook_wrids[1] == 10,
	      "layer 2 got %d batches, the last of %d starting with wr %lu (want one of 2: wr 9, 10)", hook_calls, hook_batch,
	      (unsigned long)hook_wrids[0]);

	/* Taken over by layer 2: no nudge. */
	CHECK(q->diverted && lip_nudge(q) == EBUSY, "a diverted QP was nudged");

	/* Given back (switch back): the QP was reset, no nudge is out. */
	q->nudge_mark = 99;
	struct ibv_send_wr back = {.wr_id = 11, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
	CHECK(lip_rings_load(q, &back, NULL) == 0 && q->nudge_mark == 0, "a QP given back kept a nudge out");
	q->diverted = 0;
	lip_release_cq(&cq);

	/* Armed, the nudge the oldest WR when the QP fails: its own error
	 * (RETRY_EXC_ERR, the new path failed too) is the QP's fault, and
	 * goes to layer 2 first in its batch (lip_nudge_fault); dropped, it
	 * would leave layer 2 only flushes, which are no fault. */
	CHECK(post(12, 1) == 0 && lip_nudge(q) == 0 && post(13, 1) == 0, "post 12, nudge, 13");
	done(1);
	flush();
	got = poll_all(wc, 32);
	CHECK(got == 1 && wc[0].wr_id == 12, "the application got %d completions before the nudge's error (want wr 12)", got);
	CHECK(hook_calls == 2 && hook_batch == 2 && hook_wrids[0] == LIP_NUDGE_WRID && hook_wrids[1] == 13,
	      "layer 2 got %d batches, the last of %d starting with wr %#lx (want a second of 2: the nudge, wr 13)", hook_calls,
	      hook_batch, (unsigned long)hook_wrids[0]);
	CHECK(q->nudge_mark == 0, "the nudge's error did not clear its mark");
	q->diverted = 0;
	lip_release_cq(&cq);

	/* The provider refuses the nudge: the error is said, nothing is out. */
	refuse = EINVAL;
	CHECK(lip_nudge(q) == EINVAL && q->nudge_mark == 0, "a refused nudge: mark %lu", (unsigned long)q->nudge_mark);

	/* Destroyed: a nudge on its way posts nothing. */
	int before = nposted;
	lip_qp_remove(&qp);
	CHECK(lip_nudge(q) == ENOENT && nposted == before, "a destroyed QP was nudged");
}

int main(int argc, char **argv)
{
	test();
	printf(fails ? "FAIL %d\n" : "PASS\n", fails);
	return fails != 0;
}
