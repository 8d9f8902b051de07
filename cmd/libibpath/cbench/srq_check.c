/* Checks of the shim's SRQ rings (srq.c) against a provider stub,
 * without libibverbs or a device:
 *   srq_check test
 *   srq_check bench   ns per post_srq_recv / receive completion polled, direct vs through the shim
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. srq_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"
#include "check.h"

/* ---- provider stub: the receives each SRQ was given, in order ---- */

static uint64_t given[4096];
static int ngiven;
static struct ibv_wc cqe[64];
static unsigned head, tail;

static int stub_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		if (wr->wr_id == 0xbad) {
			*bad = wr;
			return 12;
		}
		given[ngiven++ % 4096] = wr->wr_id;
	}
	return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) { return 0; }

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int i = 0;
	for (; i < n && tail != head; i++)
		wc[i] = cqe[tail++ % 64];
	return i;
}

static void complete(uint64_t wr_id, uint32_t qpn)
{
	cqe[head++ % 64] = (struct ibv_wc){.wr_id = wr_id, .qp_num = qpn, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV};
}

/* ---- layer 2's hook ---- */

static int hooked;
static uint64_t hooked_first;
static int hook_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) { return 0; }
static int hook_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int hook_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }
static void hook_intercept(struct ibv_cq *cq, struct ibv_wc *wc, int n) {}
static void hook_surfaced(struct ibv_qp *qp, struct ibv_wc *wc) {}
static int hook_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	hooked++;
	hooked_first = wr->wr_id;
	return 0;
}
struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept, hook_surfaced, hook_post_srq_recv};

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct ibv_srq srq, other;
static struct ibv_qp qa, qb, qc;

/* post posts n receives from wr_id first on, through the context's op as
 * the inline ibv_post_srq_recv does; returns its result. */
static int post(uint64_t first, int n)
{
	struct ibv_recv_wr w[16];
	struct ibv_sge sge = {.addr = 0x1000, .length = 64, .lkey = 7};
	for (int i = 0; i < n; i++)
		w[i] = (struct ibv_recv_wr){.wr_id = first + i, .sg_list = &sge, .num_sge = 1, .next = i + 1 < n ? &w[i + 1] : NULL};
	struct ibv_recv_wr *bad = NULL;
	return srq.context->ops.post_srq_recv(&srq, w, &bad);
}

/* outstanding writes the wr_ids of s's outstanding receives, oldest
 * first, into out and returns how many. */
static int outstanding(struct lip_srq *s, uint64_t *out)
{
	int n = 0;
	for (uint64_t k = s->tail; k < s->head; k++) {
		struct lip_rqe *e = &s->rq[k & s->mask];
		if (!(e->flags & (LIP_SQE_VOID | LIP_RQE_DONE)))
			out[n++] = e->wr_id;
	}
	return n;
}

static void poll_all(void)
{
	struct ibv_wc wc[8];
	while (cq.context->ops.poll_cq(&cq, 8, wc) > 0)
		;
}


/* bench times n single-WR posts to a followed SRQ and n receive
 * completions of a QP on it, each polled alone (32 posts, their 32
 * completions, 32 polls), first straight to the stub provider, then
 * through the shim; alternating rounds, best of each. */
static int bench(long n, int rounds)
{
	struct lip_ctx *c = lip_ctx_of(&ctx);
	struct lip_srq *s = lip_srq_add(&srq, 64);
	struct ibv_qp_init_attr a = {.srq = &srq, .cap = {.max_send_wr = 8}};
	qa = (struct ibv_qp){.context = &ctx, .qp_num = 0x10, .send_cq = &cq, .recv_cq = &cq};
	if (!s || !lip_qp_add(&qa, &a))
		return 2;
	struct ibv_sge sge = {.addr = 0x1000, .length = 64, .lkey = 7};
	struct ibv_recv_wr w = {.sg_list = &sge, .num_sge = 1}, *bad;
	struct ibv_wc wc[1];
	double best[2][2] = {{1e18, 1e18}, {1e18, 1e18}}; /* [direct|shim][post|poll] */
	for (int r = 0; r < rounds; r++) {
		for (int via = 0; via < 2; via++) {
			int (*postf)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **) = via ? ctx.ops.post_srq_recv : c->post_srq_recv;
			int (*poll)(struct ibv_cq *, int, struct ibv_wc *) = via ? ctx.ops.poll_cq : c->poll_cq;
			double tp = 0, tq = 0;
			for (long i = 0; i < n; i += 32) {
				double t0 = now_ns();
				for (int k = 0; k < 32; k++) {
					w.wr_id = i + k;
					postf(&srq, &w, &bad);
				}
				double t1 = now_ns();
				for (int k = 0; k < 32; k++)
					complete(i + k, qa.qp_num);
				double t2 = now_ns();
				for (int k = 0; k < 32; k++)
					poll(&cq, 1, wc);
				double t3 = now_ns();
				tp += t1 - t0;
				tq += t3 - t2;
			}
			if (tp / n < best[via][0])
				best[via][0] = tp / n;
			if (tq / n < best[via][1])
				best[via][1] = tq / n;
		}
	}
	printf("post_srq_recv direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][0], best[1][0], best[1][0] - best[0][0]);
	printf("poll_cq_srq direct_ns %.2f shim_ns %.2f added_ns %.2f\n", best[0][1], best[1][1], best[1][1] - best[0][1]);
	return 0;
}

int main(int argc, char **argv)
{
	int is_bench = argc > 1 && strcmp(argv[1], "bench") == 0;
	if (argc < 2 || (strcmp(argv[1], "test") && !is_bench)) {
		fprintf(stderr, "usage: srq_check test|bench\n");
		return 2;
	}
	ctx.ops.post_send = stub_post_send;
	ctx.ops.post_recv = stub_post_recv;
	ctx.ops.poll_cq = stub_poll_cq;
	ctx.ops.post_srq_recv = stub_post_srq_recv;
	cq.context = &ctx;
	srq.context = other.context = &ctx;
	if (!lip_ctx_add(&ctx)) {
		fprintf(stderr, "setup failed\n");
		return 2;
	}
	if (is_bench)
		return bench(argc > 2 ? atol(argv[2]) : 4000000, argc > 3 ? atoi(argv[3]) : 5);
	CHECK(ctx.ops.post_srq_recv == lip_post_srq_recv, "the context's post_srq_recv is not the shim's");

	/* an SRQ not followed: posts pass, nothing recorded, its QPs get no rings */
	CHECK(post(1, 2) == 0 && ngiven == 2, "an unfollowed SRQ's post: %d given", ngiven);
	struct ibv_qp_init_attr a = {.srq = &other, .cap = {.max_send_wr = 8}};
	qc = (struct ibv_qp){.context = &ctx, .qp_num = 0x30, .send_cq = &cq, .recv_cq = &cq};
	errno = 0;
	CHECK(lip_qp_add(&qc, &a) == NULL && errno == EINVAL, "a QP on an unfollowed SRQ got rings (errno %d)", errno);

	struct lip_srq *s = lip_srq_add(&srq, 4);
	CHECK(s && s->mask == 7 && lip_srq_of(&srq) == s, "lip_srq_add: ring of %u", s ? s->mask + 1 : 0);
	a.srq = &srq;
	qa = (struct ibv_qp){.context = &ctx, .qp_num = 0x10, .send_cq = &cq, .recv_cq = &cq};
	qb = (struct ibv_qp){.context = &ctx, .qp_num = 0x20, .send_cq = &cq, .recv_cq = &cq};
	struct lip_qp *la = lip_qp_add(&qa, &a), *lb = lip_qp_add(&qb, &a);
	CHECK(la && lb && la->srq == s && lb->srq == s, "QPs on the followed SRQ");

	/* recorded in order; a refused WR and those after it are void */
	ngiven = 0;
	CHECK(post(10, 4) == 0 && ngiven == 4, "post of 4: %d given", ngiven);
	uint64_t o[64];
	int n = outstanding(s, o);
	CHECK(n == 4 && o[0] == 10 && o[3] == 13, "outstanding after the post: %d", n);

	/* completions retire by wr_id, out of order, whichever QP took them */
	complete(12, qb.qp_num);
	complete(10, qa.qp_num);
	poll_all();
	n = outstanding(s, o);
	CHECK(n == 2 && o[0] == 11 && o[1] == 13, "after 12 and 10 completed: %d outstanding (%lu, %lu)", n,
	      n > 0 ? (unsigned long)o[0] : 0, n > 1 ? (unsigned long)o[1] : 0);
	CHECK(la->recvs_done == 1 && lb->recvs_done == 1, "receive counters %lu/%lu, want 1/1",
	      (unsigned long)la->recvs_done, (unsigned long)lb->recvs_done);
	CHECK(s->tail == 1, "tail %lu: only the oldest retired one is passed", (unsigned long)s->tail);
	/* a completion of a receive never posted retires nothing, counts nothing */
	complete(99, qa.qp_num);
	poll_all();
	CHECK(outstanding(s, o) == 2 && la->recvs_done == 1, "a completion of nothing retired something");

	/* refused: void, never outstanding */
	struct ibv_recv_wr w2[2];
	struct ibv_sge sge = {.addr = 0x2000, .length = 64, .lkey = 7};
	w2[0] = (struct ibv_recv_wr){.wr_id = 20, .sg_list = &sge, .num_sge = 1, .next = &w2[1]};
	w2[1] = (struct ibv_recv_wr){.wr_id = 0xbad, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;
	CHECK(ctx.ops.post_srq_recv(&srq, w2, &bad) == 12 && bad == &w2[1], "refused post");
	n = outstanding(s, o);
	CHECK(n == 3 && o[2] == 20, "after a refused post: %d outstanding", n);

	/* wrap-around: many rounds, each retired out of order (the oldest
	 * outstanding ones are consumed first, as an SRQ consumes) */
	complete(11, qa.qp_num);
	complete(20, qb.qp_num);
	complete(13, qa.qp_num);
	poll_all();
	for (int r = 0; r < 100; r++) {
		uint64_t b = 1000 + 4 * r;
		post(b, 3);
		complete(b + 2, qa.qp_num);
		complete(b, qb.qp_num);
		complete(b + 1, qa.qp_num);
		poll_all();
	}
	n = outstanding(s, o);
	CHECK(n == 0 && s->tail == s->head && s->overflow == 0, "after 100 rounds: %d outstanding, overflow %lu",
	      n, (unsigned long)s->overflow);
	CHECK(la->recvs_done + lb->recvs_done == 305, "receive counters %lu + %lu, want 305",
	      (unsigned long)la->recvs_done, (unsigned long)lb->recvs_done);

	/* a receive never consumed while later ones are holds the tail:
	 * posts past the ring's size overrun it, and it says so */
	post(5000, 3);
	complete(5001, qa.qp_num);
	complete(5002, qa.qp_num);
	poll_all();
	CHECK(s->overflow == 0, "overflow before the ring is full");
	for (int r = 0; r < 3; r++) {
		post(6000 + 4 * r, 2);
		complete(6000 + 4 * r, qb.qp_num);
		complete(6001 + 4 * r, qb.qp_num);
		poll_all();
	}
	CHECK(s->overflow > 0, "posts past a ring of 8 held by receive 5000 did not overflow");

	/* diverted: posts go to layer 2's hook */
	int before = ngiven;
	CHECK(lip_srq_divert(s) == 0, "divert");
	CHECK(lip_srq_divert(s) == -1 && errno == EALREADY, "a second divert");
	post(7000, 2);
	CHECK(hooked == 1 && hooked_first == 7000 && ngiven == before, "a diverted SRQ's post: hook %d, provider %d", hooked, ngiven - before);

	/* forgotten: posts pass to the provider again */
	lip_srq_remove(&srq);
	CHECK(lip_srq_of(&srq) == NULL, "removed SRQ still found");
	post(8000, 1);
	CHECK(ngiven == before + 1, "a removed SRQ's post did not reach the provider");

	/* a context's SRQs go with it */
	CHECK(lip_srq_add(&srq, 4) != NULL, "added again");
	lip_ctx_remove(&ctx);
	CHECK(lip_srq_of(&srq) == NULL && ctx.ops.post_srq_recv == stub_post_srq_recv, "the closed context's SRQ is still followed");

	printf(fails ? "FAIL\n" : "PASS\n");
	return fails != 0;
}
