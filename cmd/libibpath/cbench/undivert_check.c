/* Checks giving a diverted QP back to the hot path (lip_undivert,
 * divert.c) and the posts layer 2 hands back on the way (LIP_HOME,
 * hotpath.c), against provider stubs for the application's device and a
 * backup device, without libibverbs or a device:
 *   undivert_check test
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. undivert_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "shim.h"
#include "check.h"

/* ---- provider stubs: what each device was given, in order ---- */

struct dev {
	struct ibv_context ctx;
	uint64_t sent[256], rcvd[256];
	int nsent, nrcvd;
	struct ibv_wc cq[64];
	unsigned head, tail;
};

static struct dev app, bak;

static struct dev *dev_of(struct ibv_context *c) { return c == &app.ctx ? &app : &bak; }

/* wr_id 0xbad is refused (errno 12), with what follows it */
static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct dev *d = dev_of(qp->context);
	for (; wr; wr = wr->next) {
		if (wr->wr_id == 0xbad) {
			*bad = wr;
			return 12;
		}
		d->sent[d->nsent++ % 256] = wr->wr_id;
	}
	return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct dev *d = dev_of(qp->context);
	for (; wr; wr = wr->next) {
		if (wr->wr_id == 0xbad) {
			*bad = wr;
			return 12;
		}
		d->rcvd[d->nrcvd++ % 256] = wr->wr_id;
	}
	return 0;
}

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct dev *d = dev_of(cq->context);
	int i = 0;
	for (; i < n && d->tail != d->head; i++)
		wc[i] = d->cq[d->tail++ % 64];
	return i;
}

static void complete(uint64_t wr_id, uint32_t qpn, enum ibv_wc_opcode op)
{
	app.cq[app.head++ % 64] = (struct ibv_wc){.wr_id = wr_id, .qp_num = qpn, .status = IBV_WC_SUCCESS, .opcode = op};
}

/* ---- layer 2 stand-ins ---- */

static struct ibv_context *actx = &app.ctx;
static struct ibv_cq cq, bcq;
static struct ibv_qp qp, qp2, bqp;
static struct lip_qp *q;

enum mode {
	PLAIN,     /* layer 2 takes the post */
	HOME,      /* layer 2 gave the QP back meanwhile: LIP_HOME */
	REDIVERT,  /* ... and diverted it again: LIP_HOME each time */
	LANE_HOME, /* the QP left the lane and came back home: LIP_HOME */
};
static enum mode mode;
static int hook_sends, hook_recvs;
static uint64_t hook_first;

static void give_back(void)
{
	if (mode == LANE_HOME)
		lip_express_off(q);
	CHECK(lip_undivert(q, NULL, NULL, 0, 0) == 0, "the hook's undivert: errno %d", errno);
	if (mode == REDIVERT)
		CHECK(lip_divert(q) == 0, "the hook's divert");
}

static int hook_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	hook_sends++;
	hook_first = wr->wr_id;
	if (mode == PLAIN)
		return 0;
	give_back();
	return LIP_HOME;
}

static int hook_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	hook_recvs++;
	hook_first = wr->wr_id;
	if (mode == PLAIN)
		return 0;
	give_back();
	return LIP_HOME;
}

static int hook_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }
static void hook_intercept(struct ibv_cq *cq, struct ibv_wc *wc, int n) {}
static void hook_surfaced(struct ibv_qp *qp, struct ibv_wc *wc) {}
struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept, hook_surfaced};

static void setup(void)
{
	for (struct dev *d = &app; d; d = d == &app ? &bak : NULL) {
		d->ctx.ops.post_send = stub_post_send;
		d->ctx.ops.post_recv = stub_post_recv;
		d->ctx.ops.poll_cq = stub_poll_cq;
	}
	cq.context = &app.ctx;
	bcq.context = &bak.ctx;
	qp = (struct ibv_qp){.context = &app.ctx, .qp_num = 0x1c3, .send_cq = &cq, .recv_cq = &cq};
	qp2 = (struct ibv_qp){.context = &app.ctx, .qp_num = 0x2c3, .send_cq = &cq, .recv_cq = &cq};
	bqp = (struct ibv_qp){.context = &bak.ctx, .qp_num = 0x5b5, .send_cq = &bcq, .recv_cq = &bcq};
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 16, .max_recv_wr = 8, .max_inline_data = 32}};
	if (!lip_ctx_add(&app.ctx) || !(q = lip_qp_add(&qp, &a)) || !lip_qp_add(&qp2, &a)) {
		fprintf(stderr, "setup failed\n");
		exit(2);
	}
}

/* ---- helpers ---- */

static struct ibv_send_wr wr_of(uint64_t wr_id, enum ibv_wr_opcode op, int flags, struct ibv_sge *sge, int nsge)
{
	return (struct ibv_send_wr){.wr_id = wr_id, .opcode = op, .send_flags = flags, .sg_list = sge, .num_sge = nsge};
}

static void link_sends(struct ibv_send_wr *w, int n)
{
	for (int i = 0; i < n; i++)
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
}

static void link_recvs(struct ibv_recv_wr *w, int n)
{
	for (int i = 0; i < n; i++)
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
}

/* outstanding lists the wr_ids a divert would read from the rings (what
 * readRings in divert.go takes: entries from tail to head, void ones
 * skipped). */
static int outstanding_sends(uint64_t *ids, int max)
{
	int n = 0;
	for (uint64_t k = q->stail; k < q->shead && n < max; k++)
		if (!(q->sq[k & q->smask].flags & LIP_SQE_VOID))
			ids[n++] = q->sq[k & q->smask].wr_id;
	return n;
}

static int outstanding_recvs(uint64_t *ids, int max)
{
	int n = 0;
	for (uint64_t k = q->rtail; k < q->rhead && n < max; k++)
		if (!(q->rq[k & q->rmask].flags & LIP_SQE_VOID))
			ids[n++] = q->rq[k & q->rmask].wr_id;
	return n;
}

static int ids_are(const uint64_t *ids, int n, const uint64_t *want, int nwant)
{
	if (n != nwant)
		return 0;
	for (int i = 0; i < n; i++)
		if (ids[i] != want[i])
			return 0;
	return 1;
}

#define IDS(...) ((const uint64_t[]){__VA_ARGS__}), (int)(sizeof((const uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t))

/* ---- (a) the rings a QP comes back with ---- */

static void check_undivert(void)
{
	/* 30 posts into a 16-entry ring, none completed: it overflowed */
	for (int i = 0; i < 30; i++) {
		struct ibv_send_wr w = wr_of(i, IBV_WR_RDMA_WRITE, 0, NULL, 0), *bad;
		CHECK(actx->ops.post_send(&qp, &w, &bad) == 0, "post %d", i);
	}
	CHECK(q->overflow > 0 && q->shead == 30, "overflow %lu head %lu", (unsigned long)q->overflow, (unsigned long)q->shead);
	lip_qp_arm(q, 1);
	CHECK(lip_divert(q) == 0, "divert");
	struct ibv_send_wr wd = wr_of(99, IBV_WR_SEND, 0, NULL, 0), *bad = NULL;
	CHECK(actx->ops.post_send(&qp, &wd, &bad) == 0 && hook_sends == 1 && q->shead == 30, "diverted: to layer 2, not recorded");

	/* what layer 2 gives back: 5 sends (an inline one over two SGEs, one
	 * with more SGEs than the ring keeps, an immediate, an atomic) and 3
	 * receives; positions 30..34 wrap the ring */
	char payload[16] = "hello world";
	struct ibv_sge s0 = {0x1000, 8, 0x10};
	struct ibv_sge s1[2] = {{(uintptr_t)payload, 6, 0}, {(uintptr_t)payload + 6, 5, 0}};
	struct ibv_sge s2[LIP_MAX_SGE + 1];
	for (int i = 0; i <= LIP_MAX_SGE; i++)
		s2[i] = (struct ibv_sge){0x2000 + 0x100 * i, 16, 0x10};
	struct ibv_sge s3 = {0x3000, 8, 0x10}, s4 = {0x4000, 8, 0x10};
	struct ibv_send_wr sends[5] = {
		wr_of(100, IBV_WR_RDMA_WRITE, 0, &s0, 1),
		wr_of(101, IBV_WR_SEND, IBV_SEND_INLINE, s1, 2),
		wr_of(102, IBV_WR_SEND, IBV_SEND_SIGNALED, s2, LIP_MAX_SGE + 1),
		wr_of(103, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_SEND_SIGNALED, &s3, 1),
		wr_of(104, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, &s4, 1),
	};
	sends[0].wr.rdma.remote_addr = 0x9100, sends[0].wr.rdma.rkey = 0x71;
	sends[3].wr.rdma.remote_addr = 0x9300, sends[3].wr.rdma.rkey = 0x73;
	sends[3].imm_data = htonl(0xabcd);
	sends[4].wr.atomic.remote_addr = 0x9400, sends[4].wr.atomic.rkey = 0x74, sends[4].wr.atomic.compare_add = 5;
	link_sends(sends, 5);
	struct ibv_sge rs[3] = {{0x5000, 64, 0x10}, {0x5100, 64, 0x10}, {0x5200, 64, 0x10}};
	struct ibv_recv_wr recvs[3] = {{.wr_id = 200, .sg_list = &rs[0], .num_sge = 1}, {.wr_id = 201, .sg_list = &rs[1], .num_sge = 1},
				       {.wr_id = 202, .sg_list = &rs[2], .num_sge = 1}};
	link_recvs(recvs, 3);
	int sent0 = app.nsent;
	CHECK(lip_undivert(q, sends, recvs, 40, 50) == 0, "undivert: errno %d", errno);
	memcpy(payload, "overwritten", 11); /* the caller frees its copy */

	CHECK(!q->diverted && q->armed && lip_cq_diverted(&cq), "flags: diverted %d armed %d, the CQ stays diverted %d", q->diverted,
	      q->armed, lip_cq_diverted(&cq));
	CHECK(q->stail == 30 && q->shead == 35 && q->rhead - q->rtail == 3 && q->overflow == 0,
	      "rings: send %lu..%lu, %lu receives, overflow %lu", (unsigned long)q->stail, (unsigned long)q->shead,
	      (unsigned long)(q->rhead - q->rtail), (unsigned long)q->overflow);
	CHECK(q->notifs_done == 40 && q->recvs_done == 50, "counters %lu %lu", (unsigned long)q->notifs_done, (unsigned long)q->recvs_done);
	struct lip_sqe *e0 = &q->sq[30 & q->smask], *e1 = &q->sq[31 & q->smask], *e2 = &q->sq[32 & q->smask];
	struct lip_sqe *e3 = &q->sq[33 & q->smask], *e4 = &q->sq[34 & q->smask];
	CHECK(e0->wr_id == 100 && e0->opcode == IBV_WR_RDMA_WRITE && e0->remote_addr == 0x9100 && e0->rkey == 0x71 && e0->num_sge == 1 &&
	      e0->sge[0].addr == 0x1000 && e0->flags == 0, "entry 100");
	CHECK(e1->wr_id == 101 && e1->inline_len == 11 && e1->num_sge == 2 && e1->flags == 0 &&
	      memcmp(q->inl + (31 & q->smask) * q->inl_max, "hello world", 11) == 0,
	      "entry 101: the inline payload was not copied from its SGEs (len %u)", e1->inline_len);
	CHECK(e2->wr_id == 102 && (e2->flags & LIP_SQE_PARTIAL) && e2->num_sge == LIP_MAX_SGE + 1, "entry 102 is not partial");
	CHECK(e3->wr_id == 103 && e3->imm == htonl(0xabcd) && e3->remote_addr == 0x9300 && e3->rkey == 0x73, "entry 103");
	CHECK(e4->wr_id == 104 && e4->remote_addr == 0x9400 && e4->rkey == 0x74 && e4->compare_add == 5, "entry 104");
	CHECK(app.nsent == sent0, "undivert posted something");

	/* posts go to the provider again, recorded after the seeded WRs */
	struct ibv_send_wr w5 = wr_of(105, IBV_WR_SEND, IBV_SEND_SIGNALED, &s0, 1);
	struct ibv_recv_wr r3 = {.wr_id = 203, .sg_list = &rs[0], .num_sge = 1}, *rbad;
	CHECK(actx->ops.post_send(&qp, &w5, &bad) == 0 && actx->ops.post_recv(&qp, &r3, &rbad) == 0, "posts after undivert");
	CHECK(hook_sends == 1 && hook_recvs == 0 && app.nsent == sent0 + 1 && app.sent[sent0 % 256] == 105 && app.nrcvd == 1 &&
	      app.rcvd[0] == 203, "posts reach the provider: hook %d/%d, provider %d/%d", hook_sends, hook_recvs, app.nsent - sent0, app.nrcvd);
	uint64_t ids[32];
	int n = outstanding_sends(ids, 32);
	CHECK(ids_are(ids, n, IDS(100, 101, 102, 103, 104, 105)), "sends after the post: %d", n);
	n = outstanding_recvs(ids, 32);
	CHECK(ids_are(ids, n, IDS(200, 201, 202, 203)), "receives after the post: %d", n);

	/* completions retire in order: layer 2 polls the still diverted CQ
	 * and retires (Hotpath.Retire): 102's retires 100..102 */
	struct lip_ctx *c = lip_ctx_of(&app.ctx);
	lip_retire_wc(c, &(struct ibv_wc){.wr_id = 102, .qp_num = qp.qp_num, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND});
	lip_retire_wc(c, &(struct ibv_wc){.wr_id = 200, .qp_num = qp.qp_num, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV});
	CHECK(q->stail == 33 && q->notifs_done == 42 && q->recvs_done == 51, "retired to %lu, notifs %lu recvs %lu (want 33, 42, 51)",
	      (unsigned long)q->stail, (unsigned long)q->notifs_done, (unsigned long)q->recvs_done);
	/* then the CQ is released and the hot path polls it: 103's retires
	 * 103 alone (signaled), a receive the oldest */
	lip_release_cq(&cq);
	complete(103, qp.qp_num, IBV_WC_RDMA_WRITE);
	complete(201, qp.qp_num, IBV_WC_RECV);
	struct ibv_wc wc[4];
	CHECK(actx->ops.poll_cq(&cq, 4, wc) == 2 && wc[0].wr_id == 103, "hot path poll");
	CHECK(q->stail == 34 && q->notifs_done == 43 && q->recvs_done == 52, "retired to %lu, notifs %lu recvs %lu (want 34, 43, 52)",
	      (unsigned long)q->stail, (unsigned long)q->notifs_done, (unsigned long)q->recvs_done);

	/* diverted again: the rings give what was seeded, less what retired,
	 * with what was posted since */
	CHECK(lip_divert(q) == 0, "second divert");
	n = outstanding_sends(ids, 32);
	CHECK(ids_are(ids, n, IDS(104, 105)), "sends at the second divert: %d", n);
	n = outstanding_recvs(ids, 32);
	CHECK(ids_are(ids, n, IDS(202, 203)), "receives at the second divert: %d", n);
	CHECK(q->overflow == 0 && e4->wr_id == 104 && e4->rkey == 0x74, "entry 104 at the second divert");
}

/* ---- (c) what lip_undivert refuses, changing nothing ---- */

static void check_refusals(void)
{
	struct lip_qp *q2 = lip_qp_find(lip_ctx_of(&app.ctx), qp2.qp_num);
	errno = 0;
	CHECK(lip_undivert(q2, NULL, NULL, 0, 0) == -1 && errno == EINVAL, "not diverted: errno %d", errno);

	uint64_t st = q->stail, sh = q->shead, rt = q->rtail, rh = q->rhead, nd = q->notifs_done, rd = q->recvs_done;
	struct ibv_send_wr many[17];
	for (int i = 0; i < 17; i++)
		many[i] = wr_of(500 + i, IBV_WR_SEND, 0, NULL, 0);
	link_sends(many, 17);
	errno = 0;
	CHECK(lip_undivert(q, many, NULL, 1, 1) == -1 && errno == ENOSPC, "17 sends into 16: errno %d", errno);
	struct ibv_recv_wr rmany[9];
	memset(rmany, 0, sizeof(rmany));
	link_recvs(rmany, 9);
	errno = 0;
	CHECK(lip_undivert(q, many, rmany, 1, 1) == -1 && errno == ENOSPC, "9 receives into 8: errno %d", errno);
	struct lip_xl *x = lip_xl_new(&bqp, &bcq, NULL, 0x77);
	lip_express_on(q, x);
	errno = 0;
	CHECK(lip_undivert(q, NULL, NULL, 1, 1) == -1 && errno == EBUSY, "on the express lane: errno %d", errno);
	lip_express_off(q);
	CHECK(q->diverted && q->stail == st && q->shead == sh && q->rtail == rt && q->rhead == rh && q->notifs_done == nd &&
	      q->recvs_done == rd, "a refused undivert changed the QP");
	/* exactly 16 fit; no WRs at all is an empty ring */
	CHECK(lip_undivert(q, many + 1, NULL, 1, 1) == 0 && q->shead - q->stail == 16, "16 sends into 16");
	CHECK(lip_divert(q) == 0, "divert");
	CHECK(lip_undivert(q, NULL, NULL, 7, 8) == 0 && q->shead == q->stail && q->rhead == q->rtail && q->notifs_done == 7 &&
	      q->recvs_done == 8, "empty chains");
	errno = 0;
	CHECK(lip_undivert(q, NULL, NULL, 0, 0) == -1 && errno == EINVAL, "undivert twice: errno %d", errno);
}

/* ---- (b) posts layer 2 hands back: LIP_HOME ---- */

static void check_home(void)
{
	uint64_t ids[32];
	int n;
	struct ibv_send_wr *bad;
	struct ibv_recv_wr *rbad;

	/* the whole chain comes back: the hot path posts it once, recorded */
	CHECK(lip_divert(q) == 0, "divert");
	mode = HOME;
	hook_sends = 0;
	int s0 = app.nsent;
	struct ibv_send_wr w[3] = {wr_of(300, IBV_WR_SEND, 0, NULL, 0), wr_of(301, IBV_WR_SEND, 0, NULL, 0),
				   wr_of(302, IBV_WR_SEND, IBV_SEND_SIGNALED, NULL, 0)};
	link_sends(w, 3);
	bad = NULL;
	CHECK(actx->ops.post_send(&qp, w, &bad) == 0 && bad == NULL, "home: posted");
	CHECK(hook_sends == 1 && hook_first == 300 && !q->diverted, "home: hook %d first %lu", hook_sends, (unsigned long)hook_first);
	CHECK(app.nsent == s0 + 3 && app.sent[s0 % 256] == 300 && app.sent[(s0 + 2) % 256] == 302, "home: the provider got %d",
	      app.nsent - s0);
	n = outstanding_sends(ids, 32);
	CHECK(ids_are(ids, n, IDS(300, 301, 302)), "home: %d recorded", n);

	/* the provider refuses the second: bad is the application's WR, the
	 * refused ones void */
	CHECK(lip_divert(q) == 0, "divert");
	s0 = app.nsent;
	struct ibv_send_wr r[3] = {wr_of(310, IBV_WR_SEND, 0, NULL, 0), wr_of(0xbad, IBV_WR_SEND, 0, NULL, 0),
				   wr_of(312, IBV_WR_SEND, 0, NULL, 0)};
	link_sends(r, 3);
	bad = NULL;
	CHECK(actx->ops.post_send(&qp, r, &bad) == 12 && bad == &r[1], "home, refused: bad %p want %p", (void *)bad, (void *)&r[1]);
	CHECK(app.nsent == s0 + 1 && (q->sq[(q->shead - 1) & q->smask].flags & LIP_SQE_VOID) &&
	      (q->sq[(q->shead - 2) & q->smask].flags & LIP_SQE_VOID) && !(q->sq[(q->shead - 3) & q->smask].flags & LIP_SQE_VOID),
	      "home, refused: provider %d, void marks", app.nsent - s0);

	/* receives */
	CHECK(lip_divert(q) == 0, "divert");
	hook_recvs = 0;
	int r0 = app.nrcvd;
	uint64_t rh = q->rhead;
	struct ibv_recv_wr rw[2] = {{.wr_id = 400}, {.wr_id = 401}};
	link_recvs(rw, 2);
	rbad = NULL;
	CHECK(actx->ops.post_recv(&qp, rw, &rbad) == 0 && hook_recvs == 1 && app.nrcvd == r0 + 2 && app.rcvd[r0 % 256] == 400 &&
	      q->rhead == rh + 2 && q->rq[rh & q->rmask].wr_id == 400, "home, receives: provider %d ring %lu", app.nrcvd - r0,
	      (unsigned long)(q->rhead - rh));
	CHECK(lip_divert(q) == 0, "divert");
	struct ibv_recv_wr rr[2] = {{.wr_id = 410}, {.wr_id = 0xbad}};
	link_recvs(rr, 2);
	rbad = NULL;
	CHECK(actx->ops.post_recv(&qp, rr, &rbad) == 12 && rbad == &rr[1] && (q->rq[(q->rhead - 1) & q->rmask].flags & LIP_SQE_VOID) &&
	      !(q->rq[(q->rhead - 2) & q->rmask].flags & LIP_SQE_VOID), "home, receive refused: bad %p", (void *)rbad);

	/* diverted again each time it comes back: EIO after the tries, bad
	 * the first WR, nothing posted */
	CHECK(lip_divert(q) == 0, "divert");
	mode = REDIVERT;
	hook_sends = 0;
	s0 = app.nsent;
	struct ibv_send_wr wx = wr_of(320, IBV_WR_SEND, 0, NULL, 0);
	bad = NULL;
	CHECK(actx->ops.post_send(&qp, &wx, &bad) == EIO && bad == &wx && app.nsent == s0 && hook_sends == 8,
	      "diverted again each time: bad %p hook %d provider %d", (void *)bad, hook_sends, app.nsent - s0);
	CHECK(q->diverted, "the QP stays diverted");

	/* the express lane posts the first WR, misses the key of the second;
	 * the QP comes home meanwhile: the hot path posts the second and the
	 * third, nothing twice */
	struct lip_xl *x = lip_xl_new(&bqp, &bcq, NULL, 0x77);
	CHECK(x && lip_xl_key(x, 0, 0x10, 0x20) == 0, "lane");
	lip_express_on(q, x);
	mode = LANE_HOME;
	hook_sends = 0;
	s0 = app.nsent;
	int b0 = bak.nsent;
	struct ibv_sge known = {0x1000, 8, 0x10}, unknown = {0x2000, 8, 0x11};
	struct ibv_send_wr lw[3] = {wr_of(330, IBV_WR_SEND, 0, &known, 1), wr_of(331, IBV_WR_SEND, 0, &unknown, 1),
				    wr_of(332, IBV_WR_SEND, 0, &known, 1)};
	link_sends(lw, 3);
	bad = NULL;
	CHECK(actx->ops.post_send(&qp, lw, &bad) == 0, "lane, then home");
	CHECK(bak.nsent == b0 + 1 && bak.sent[b0 % 256] == 330, "the lane posted %d (want 330 only)", bak.nsent - b0);
	CHECK(app.nsent == s0 + 2 && app.sent[s0 % 256] == 331 && app.sent[(s0 + 1) % 256] == 332 && hook_sends == 1 && hook_first == 331,
	      "the hot path posted %d (want 331, 332), hook %d first %lu", app.nsent - s0, hook_sends, (unsigned long)hook_first);
	n = outstanding_sends(ids, 32);
	CHECK(ids_are(ids, n, IDS(331, 332)), "lane, then home: %d recorded", n);
	mode = PLAIN;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "test")) {
		fprintf(stderr, "usage: undivert_check test\n");
		return 2;
	}
	alarm(20); /* a lock left held would hang */
	if (getenv("IBPATH_SINGLE_POSTER") && strcmp(getenv("IBPATH_SINGLE_POSTER"), "1") == 0)
		lip_single_poster = 1;
	setup();
	check_undivert();
	check_refusals();
	check_home();
	printf(fails ? "FAIL %d\n" : "PASS\n", fails);
	return fails != 0;
}
