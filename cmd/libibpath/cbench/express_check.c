/* Checks and measures the shim's express lane (express.c) against two
 * provider stubs, the application's device and the backup device:
 *   express_check test    key translation, misses, polls, surfacing, removal,
 *                         the rings a recording lane keeps (lip_xl_record)
 *   express_check bench   ns per post_send / poll_cq: the backup provider
 *                         called directly vs through the express lane
 * Built by internal/shim's tests:
 *   gcc -O2 -I.. express_check.c ../hotpath.c ../divert.c ../express.c ../channel.c ../wrapi.c ../nudge.c ../srq.c -lpthread */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shim.h"
#include "check.h"

/* A device stub: what was posted to it, and a CQ ring the test fills. */
struct dev {
	struct ibv_context ctx;
	struct ibv_send_wr sent[64];
	struct ibv_sge sent_sge[64];
	int nsent;
	struct ibv_recv_wr rcvd[64];
	struct ibv_sge rcvd_sge[64];
	int nrcvd;
	uint64_t refuse_wrid; /* post_send refuses this WR (ENOMEM) */
	struct ibv_wc cq[256];
	unsigned head, tail;
	int autocomplete; /* bench: each signaled send completes at once */
};

static struct dev app, bak;

static struct dev *dev_of(struct ibv_context *c) { return c == &app.ctx ? &app : &bak; }

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct dev *d = dev_of(qp->context);
	for (; wr; wr = wr->next) {
		if (d->refuse_wrid && wr->wr_id == d->refuse_wrid) {
			*bad = wr;
			return ENOMEM;
		}
		if (d->autocomplete) {
			struct ibv_wc *w = &d->cq[d->head++ % 256];
			w->wr_id = wr->wr_id, w->qp_num = qp->qp_num, w->status = IBV_WC_SUCCESS, w->opcode = IBV_WC_RDMA_WRITE;
			continue;
		}
		int i = d->nsent++ % 64;
		d->sent[i] = *wr;
		d->sent_sge[i] = wr->num_sge ? wr->sg_list[0] : (struct ibv_sge){0};
	}
	return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct dev *d = dev_of(qp->context);
	for (; wr; wr = wr->next) {
		int i = d->nrcvd++ % 64;
		d->rcvd[i] = *wr;
		d->rcvd_sge[i] = wr->num_sge ? wr->sg_list[0] : (struct ibv_sge){0};
	}
	return 0;
}

/* Each stub CQ serves its device's ring (one CQ per device here, except
 * that the backup device's second CQ, brcq, is empty). */
static struct ibv_cq acq, bcq, brcq;

static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (cq == &brcq)
		return 0;
	struct dev *d = dev_of(cq->context);
	int i = 0;
	for (; i < n && d->tail != d->head; i++)
		wc[i] = d->cq[d->tail++ % 256];
	return i;
}

static void complete(struct dev *d, uint64_t wr_id, uint32_t qpn, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t imm)
{
	struct ibv_wc *w = &d->cq[d->head++ % 256];
	memset(w, 0, sizeof(*w));
	w->wr_id = wr_id, w->qp_num = qpn, w->status = st, w->opcode = op, w->imm_data = imm, w->src_qp = 0x999;
}

/* layer 2 stand-ins */
static int hook_sends, hook_polls, hook_surfaced;
static uint64_t hook_first_wrid;
static struct lip_qp *lq;
static int hook_fixes = 1; /* the send hook adds the missing lkey 0x11 -> 0x21 */

static int hook_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	hook_sends++;
	hook_first_wrid = wr->wr_id;
	if (lq->express && hook_fixes && wr->num_sge && wr->sg_list[0].lkey == 0x11)
		lip_xl_key(lq->xl, 0, 0x11, 0x21);
	return lq->express ? LIP_AGAIN : 0;
}

static int hook_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return lq->express ? LIP_AGAIN : 0;
}

static int hook_poll_again; /* the poll hook answers LIP_AGAIN (the lane's CQ table lags) */

static int hook_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	hook_polls++;
	return hook_poll_again ? LIP_AGAIN : 0;
}

static void hook_intercept(struct ibv_cq *cq, struct ibv_wc *wc, int n) {}

static struct ibv_wc surfaced_wc;

static void hook_express_surfaced(struct ibv_qp *qp, struct ibv_wc *wc)
{
	hook_surfaced++;
	surfaced_wc = *wc;
}

struct lip_hooks lip_hooks = {hook_post_send, hook_post_recv, hook_poll_cq, hook_intercept, hook_express_surfaced};

static struct ibv_qp qp, other, bqp;

static void setup(void)
{
	for (struct dev *d = &app; d; d = d == &app ? &bak : NULL) {
		d->ctx.ops.post_send = stub_post_send;
		d->ctx.ops.post_recv = stub_post_recv;
		d->ctx.ops.poll_cq = stub_poll_cq;
	}
	acq.context = &app.ctx;
	bcq.context = brcq.context = &bak.ctx;
	qp.context = other.context = &app.ctx;
	qp.qp_num = 0x1c3;
	other.qp_num = 0x2c3;
	qp.send_cq = qp.recv_cq = other.send_cq = other.recv_cq = &acq;
	bqp.context = &bak.ctx;
	bqp.qp_num = 0x5b5;
	bqp.send_cq = bqp.recv_cq = &bcq;
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_inline_data = 64}};
	if (!lip_ctx_add(&app.ctx) || !(lq = lip_qp_add(&qp, &a)) || !lip_qp_add(&other, &a)) {
		fprintf(stderr, "setup failed\n");
		exit(2);
	}
}

static struct lip_xl *lane(void)
{
	struct lip_xl *x = lip_xl_new(&bqp, &bcq, NULL, 0x77);
	if (!x || lip_xl_key(x, 0, 0x10, 0x20) || lip_xl_key(x, 1, 0x30, 0x40)) {
		fprintf(stderr, "lane setup failed\n");
		exit(2);
	}
	return x;
}

/* post1 posts one WR to the application's QP; its SGE covers real memory
 * (an inline WR's payload is read when a ring records it). */
static int post1(uint64_t wr_id, enum ibv_wr_opcode op, uint32_t lkey, uint32_t len, uint32_t rkey, int flags)
{
	static char buf[64];
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
	struct ibv_send_wr w = {.wr_id = wr_id, .opcode = op, .sg_list = &s, .num_sge = 1, .send_flags = flags};
	w.wr.rdma.rkey = rkey;
	w.wr.rdma.remote_addr = 0x9000;
	struct ibv_send_wr *bad = NULL;
	return app.ctx.ops.post_send(&qp, &w, &bad);
}

static void check_posts(void)
{
	/* before the lane: a diverted QP's posts go to layer 2 */
	CHECK(lip_divert(lq) == 0, "divert");
	CHECK(post1(1, IBV_WR_RDMA_WRITE, 0x10, 8, 0x30, IBV_SEND_SIGNALED) == 0 && hook_sends == 1 && bak.nsent == 0,
	      "diverted, not on the lane: to the hook (hook %d, backup %d)", hook_sends, bak.nsent);
	lip_express_on(lq, lane());
	hook_sends = 0;

	/* keys translated; the application's WR untouched */
	struct ibv_sge s = {.addr = 0x1000, .length = 8, .lkey = 0x10};
	struct ibv_send_wr w = {.wr_id = 2, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &s, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED};
	w.wr.rdma.rkey = 0x30;
	w.wr.rdma.remote_addr = 0x9000;
	struct ibv_send_wr *bad = NULL;
	CHECK(app.ctx.ops.post_send(&qp, &w, &bad) == 0, "lane post");
	CHECK(bak.nsent == 1 && bak.sent[0].wr_id == 2 && bak.sent_sge[0].lkey == 0x20 && bak.sent[0].wr.rdma.rkey == 0x40 &&
	      bak.sent[0].wr.rdma.remote_addr == 0x9000, "translated: n %d lkey %#x rkey %#x", bak.nsent, bak.sent_sge[0].lkey, bak.sent[0].wr.rdma.rkey);
	CHECK(s.lkey == 0x10 && w.wr.rdma.rkey == 0x30 && hook_sends == 0 && app.nsent == 0, "application's WR changed or misrouted");

	/* inline: its lkey is not looked at; zero-length WRITE: no rkey */
	CHECK(post1(3, IBV_WR_SEND, 0xdead, 8, 0, IBV_SEND_INLINE) == 0 && bak.sent_sge[1].lkey == 0xdead, "inline");
	CHECK(post1(4, IBV_WR_RDMA_WRITE, 0x10, 0, 0xbeef, 0) == 0 && bak.sent[2].wr.rdma.rkey == 0xbeef, "zero-length write");
	/* a READ whose rkey 0x31 the hook never adds: the dispatch gives up
	 * after its tries with EIO, nothing posted */
	CHECK(post1(5, IBV_WR_RDMA_READ, 0x10, 8, 0x31, 0) == EIO && bak.nsent == 3, "unknown rkey: posted %d", bak.nsent);
	/* a LOCAL_INV (its keys known) is not for the backup: layer 2 gets it */
	hook_sends = 0;
	post1(6, IBV_WR_LOCAL_INV, 0x10, 0, 0, 0);
	CHECK(bak.nsent == 3 && hook_sends > 0, "LOCAL_INV: %d on the backup, %d to layer 2", bak.nsent - 3, hook_sends);

	/* a chain whose second WR misses lkey 0x11: the first is posted
	 * once, the hook gets the second (and adds the key), the rest follow */
	hook_sends = 0;
	struct ibv_sge sg[3] = {{0x1000, 4, 0x10}, {0x2000, 4, 0x11}, {0x3000, 4, 0x10}};
	struct ibv_send_wr c[3];
	memset(c, 0, sizeof(c));
	for (int i = 0; i < 3; i++) {
		c[i].wr_id = 10 + i, c[i].opcode = IBV_WR_SEND, c[i].sg_list = &sg[i], c[i].num_sge = 1;
		c[i].next = i < 2 ? &c[i + 1] : NULL;
	}
	int n0 = bak.nsent;
	CHECK(app.ctx.ops.post_send(&qp, c, &bad) == 0, "chain with a miss");
	CHECK(bak.nsent == n0 + 3 && bak.sent[n0].wr_id == 10 && bak.sent[n0 + 1].wr_id == 11 && bak.sent[n0 + 2].wr_id == 12 &&
	      bak.sent_sge[n0 + 1].lkey == 0x21, "chain: %d posted", bak.nsent - n0);
	CHECK(hook_sends == 1 && hook_first_wrid == 11, "miss to the hook: %d calls, first %lu", hook_sends, (unsigned long)hook_first_wrid);

	/* a miss the hook never resolves: EIO after the tries, bad is the WR */
	hook_fixes = 0;
	hook_sends = 0;
	struct ibv_sge s2 = {.addr = 0x1000, .length = 8, .lkey = 0x12};
	struct ibv_send_wr w2 = {.wr_id = 20, .opcode = IBV_WR_SEND, .sg_list = &s2, .num_sge = 1};
	bad = NULL;
	CHECK(app.ctx.ops.post_send(&qp, &w2, &bad) == EIO && bad == &w2 && hook_sends == 8, "unresolved miss: bad %p hooks %d", (void *)bad, hook_sends);
	hook_fixes = 1;

	/* the backup provider refuses the second of two: bad is the
	 * application's WR */
	bak.refuse_wrid = 31;
	struct ibv_send_wr r[2];
	struct ibv_sge rs = {.addr = 0x1000, .length = 8, .lkey = 0x10};
	memset(r, 0, sizeof(r));
	r[0].wr_id = 30, r[1].wr_id = 31;
	r[0].opcode = r[1].opcode = IBV_WR_SEND;
	r[0].sg_list = r[1].sg_list = &rs;
	r[0].num_sge = r[1].num_sge = 1;
	r[0].next = &r[1];
	bad = NULL;
	CHECK(app.ctx.ops.post_send(&qp, r, &bad) == ENOMEM && bad == &r[1], "refusal: bad %p want %p", (void *)bad, (void *)&r[1]);
	bak.refuse_wrid = 0;

	/* receives: lkeys translated */
	struct ibv_sge rsg = {.addr = 0x4000, .length = 64, .lkey = 0x10};
	struct ibv_recv_wr rw = {.wr_id = 40, .sg_list = &rsg, .num_sge = 1};
	struct ibv_recv_wr *rbad = NULL;
	CHECK(app.ctx.ops.post_recv(&qp, &rw, &rbad) == 0 && bak.nrcvd == 1 && bak.rcvd_sge[0].lkey == 0x20 && rsg.lkey == 0x10,
	      "recv: n %d lkey %#x", bak.nrcvd, bak.rcvd_sge[0].lkey);
}

/* dump_has: whether lip_xl_dump writes a line holding want */
static int dump_has(const char *want)
{
	char path[] = "/tmp/express_check.XXXXXX", buf[4096];
	int fd = mkstemp(path);
	if (fd < 0)
		return 0;
	unlink(path);
	lip_xl_dump(fd);
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	if (strstr(buf, want))
		return 1;
	printf("lip_xl_dump: no \"%s\" in\n%s", want, buf);
	return 0;
}

static void check_polls(void)
{
	struct ibv_wc wc[16];
	/* before the CQ is on the lane its polls go to layer 2 */
	hook_polls = 0;
	app.ctx.ops.poll_cq(&acq, 16, wc);
	CHECK(hook_polls == 1, "CQ not on the lane: hook %d", hook_polls);
	/* layer 2 keeps answering "again": a transient state, never a
	 * negative count (MPI and NCCL take one for a dead CQ) */
	hook_polls = 0;
	hook_poll_again = 1;
	int r = app.ctx.ops.poll_cq(&acq, 16, wc);
	hook_poll_again = 0;
	CHECK(r == 0 && hook_polls > 1, "a poll layer 2 kept answering again returned %d after %d tries (want 0)", r, hook_polls);
	struct lip_qp *qs[1] = {lq};
	CHECK(lip_express_cq(&acq, qs, 1) == 0, "lip_express_cq");

	complete(&bak, 2, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&bak, LIP_CTRL_SEND_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&bak, LIP_CTRL_RECV_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, htonl(2u << 30 | 5)); /* an ack */
	/* the peer's PSN announcements (kind 0 as the refusal, the
	 * announcement bit set): dropped, not a refusal, whatever the PSN */
	complete(&bak, LIP_CTRL_RECV_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, htonl(LIP_CTRL_ANNOUNCE | 0));
	complete(&bak, LIP_CTRL_RECV_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, htonl(LIP_CTRL_ANNOUNCE | (0xabcdefu & LIP_CTRL_PSN_MASK)));
	complete(&bak, 40, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0);
	/* layer 2's other own WRs: a fence (the probe's wr_id) and the
	 * lowest reserved one, dropped as the control messages are */
	complete(&bak, LIP_OWN_WRID_MIN + 1, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&bak, LIP_OWN_WRID_MIN, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&app, 1, qp.qp_num, IBV_WC_WR_FLUSH_ERR, 0, 0);         /* the default QP's flush */
	complete(&app, 50, other.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0); /* another QP on the CQ */
	hook_polls = 0;
	int got = 0;
	for (int i = 0; i < 4; i++)
		got += app.ctx.ops.poll_cq(&acq, 16 - got, wc + got);
	CHECK(hook_polls == 0 && hook_surfaced == 0, "lane poll called layer 2: polls %d surfaced %d", hook_polls, hook_surfaced);
	CHECK(got == 3, "got %d completions, want 3 (write, recv, other QP's recv)", got);
	int seen = 0;
	for (int i = 0; i < got; i++) {
		if (wc[i].wr_id == 2) {
			seen |= 1;
			CHECK(wc[i].qp_num == qp.qp_num, "write qp_num %#x", wc[i].qp_num);
		} else if (wc[i].wr_id == 40) {
			seen |= 2;
			CHECK(wc[i].qp_num == qp.qp_num && wc[i].src_qp == 0x77, "recv qp_num %#x src %#x", wc[i].qp_num, wc[i].src_qp);
		} else if (wc[i].wr_id == 50) {
			seen |= 4;
			CHECK(wc[i].qp_num == other.qp_num && wc[i].src_qp == 0x999, "other QP's completion changed");
		}
	}
	CHECK(seen == 7, "missing completions: %x", seen);
	CHECK(lq->xl->hidden == 1 && lq->xl->completions == 2, "hidden %lu completions %lu", (unsigned long)lq->xl->hidden, (unsigned long)lq->xl->completions);
	/* what a debugger sees (lip_debug_state): the six of layer 2's own */
	CHECK(dump_has("completions 2 hidden 1 misses 25 own 6 arms 0 refused 0"), "lane dump after the polls");

	/* one poll returns as many as it can: a poll that returns less than
	 * asked means an empty CQ to a program that then waits for an event
	 * (ibv_rc_pingpong -e polls once after each), so what the lane drops
	 * (layer 2's own WRs, the default QP's flushes) is polled past */
	complete(&bak, LIP_CTRL_SEND_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&bak, LIP_OWN_WRID_MIN + 1, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
	complete(&bak, 80, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_SEND, 0);
	complete(&bak, 81, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0);
	complete(&app, 3, qp.qp_num, IBV_WC_WR_FLUSH_ERR, 0, 0);
	complete(&app, 4, qp.qp_num, IBV_WC_WR_FLUSH_ERR, 0, 0);
	complete(&app, 82, other.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0);
	int wrids = 0;
	for (int i = 0; i < 2; i++) { /* each side of the alternation first */
		got = app.ctx.ops.poll_cq(&acq, 2, wc);
		for (int j = 0; j < got; j++)
			wrids |= wc[j].wr_id == 80 ? 1 : wc[j].wr_id == 81 ? 2 : wc[j].wr_id == 82 ? 4 : 8;
		CHECK(got == 2 || (i == 1 && got == 1), "poll %d of 2 returned %d with completions waiting", i, got);
	}
	CHECK(wrids == 7, "one poll each: wr_ids seen %x, want 80, 81 and 82", wrids);
	/* (twice: the polls below count on the alternation's parity) */
	for (int i = 0; i < 2; i++)
		CHECK(app.ctx.ops.poll_cq(&acq, 2, wc) == 0, "the CQs are empty now");

	/* an error on the backup: delivered with the default QP's number,
	 * layer 2 told once; the default QP's flushes now reach the
	 * application; later posts go to the backup QP (in the error state:
	 * their flushes follow the older WRs' there), keys translated, and
	 * what it refuses, or a key the tables miss, to the default QP */
	complete(&bak, 60, bqp.qp_num, IBV_WC_RETRY_EXC_ERR, 0, 0);
	complete(&bak, 61, bqp.qp_num, IBV_WC_WR_FLUSH_ERR, 0, 0);
	complete(&app, 62, qp.qp_num, IBV_WC_WR_FLUSH_ERR, 0, 0);
	got = 0;
	for (int i = 0; i < 4; i++)
		got += app.ctx.ops.poll_cq(&acq, 16 - got, wc + got);
	CHECK(got == 3, "after the backup error: got %d, want 3", got);
	for (int i = 0; i < got; i++)
		CHECK(wc[i].qp_num == qp.qp_num && wc[i].status != IBV_WC_SUCCESS, "surfaced completion %d: qp %#x status %d", i, wc[i].qp_num, wc[i].status);
	CHECK(hook_surfaced == 1 && surfaced_wc.wr_id == 60 && lq->xl->surfaced, "surfaced %d (wr %lu)", hook_surfaced, (unsigned long)surfaced_wc.wr_id);
	int a0 = app.nsent, b0 = bak.nsent;
	CHECK(post1(69, IBV_WR_SEND, 0x10, 8, 0, 0) == 0 && bak.nsent == b0 + 1 && app.nsent == a0 &&
	      bak.sent_sge[b0 % 64].lkey == 0x20, "after surfacing: a post to the backup QP, lkey translated");
	CHECK(post1(70, IBV_WR_SEND, 0x77777, 8, 0, 0) == 0 && app.nsent == a0 + 1 && bak.nsent == b0 + 1,
	      "after surfacing: a key the tables miss goes to the default QP");
	bak.refuse_wrid = 71;
	CHECK(post1(71, IBV_WR_SEND, 0x10, 8, 0, 0) == 0 && app.nsent == a0 + 2 && bak.nsent == b0 + 1,
	      "after surfacing: a WR the backup refuses goes to the default QP");
	bak.refuse_wrid = 0;
	struct ibv_sge rsg = {.addr = 0x4000, .length = 64, .lkey = 0x10};
	struct ibv_recv_wr rw = {.wr_id = 72, .sg_list = &rsg, .num_sge = 1}, *rbad = NULL;
	int ar = app.nrcvd, br = bak.nrcvd;
	CHECK(app.ctx.ops.post_recv(&qp, &rw, &rbad) == 0 && bak.nrcvd == br + 1 && app.nrcvd == ar &&
	      bak.rcvd_sge[br % 64].lkey == 0x20, "after surfacing: a receive to the backup QP, lkey translated");
	rsg.lkey = 0x77777;
	CHECK(app.ctx.ops.post_recv(&qp, &rw, &rbad) == 0 && app.nrcvd == ar + 1 && bak.nrcvd == br + 1,
	      "after surfacing: a receive whose lkey the tables miss goes to the default QP");
}

static void check_refusal_and_off(void)
{
	/* a fresh lane; the peer's refusal surfaces */
	lip_express_on(lq, lane());
	hook_surfaced = 0;
	struct ibv_wc wc[4];
	complete(&bak, LIP_CTRL_RECV_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, htonl(LIP_CTRL_REFUSE));
	int got = app.ctx.ops.poll_cq(&acq, 4, wc);
	got += app.ctx.ops.poll_cq(&acq, 4, wc);
	CHECK(got == 0 && hook_surfaced == 1 && lq->xl->surfaced, "refusal: got %d surfaced %d", got, hook_surfaced);

	/* off the lane: posts go to layer 2 again; an empty CQ list sends the
	 * polls back too */
	lip_express_off(lq);
	hook_sends = hook_polls = 0;
	int b0 = bak.nsent;
	post1(80, IBV_WR_SEND, 0x10, 8, 0, 0);
	CHECK(hook_sends == 1 && bak.nsent == b0, "off: hook %d", hook_sends);
	CHECK(lip_express_cq(&acq, NULL, 0) == 0, "empty the CQ");
	app.ctx.ops.poll_cq(&acq, 4, wc);
	CHECK(hook_polls == 1, "CQ off the lane: hook %d", hook_polls);
}

static void check_keys(void)
{
	struct lip_xl *x = lip_xl_new(&bqp, &bcq, &brcq, 1);
	for (uint32_t k = 1; k <= 5000; k++)
		CHECK(lip_xl_key(x, k & 1, k * 7, k + 100000) == 0, "add key %u", k);
	int bad = 0;
	for (uint32_t k = 1; k <= 5000; k++) {
		uint32_t to = 0;
		if (!lip_xl_lookup(x, k & 1, k * 7, &to) || to != k + 100000)
			bad++;
		if (lip_xl_lookup(x, !(k & 1), k * 7, &to))
			bad++;
	}
	CHECK(bad == 0, "%d wrong lookups after growing", bad);
	CHECK(lip_xl_key(x, 0, 7 * 2, 1) == 0 && lip_xl_lookup(x, 0, 14, &(uint32_t){0}), "update");
	lip_xl_free(x);
}


/* bench: N single-WR post_send + poll_cq pairs on a QP on the lane,
 * against the same pairs straight to the backup provider with the keys
 * already the backup's (what an application on the backup would do).
 * Best of rounds, alternating. */
static int bench(long n, int rounds)
{
	/* mode 0: the backup provider direct; 1: the lane; 2: the lane
	 * keeping the QP's rings (the switch back on) */
	struct lip_xl *lanes[3] = {NULL, lane(), lane()};
	CHECK(lip_xl_record(lq, lanes[2], NULL, NULL, 0, 0) == 0, "lip_xl_record");
	struct lip_qp *qs[1] = {lq};
	lip_express_on(lq, lanes[1]);
	lip_express_cq(&acq, qs, 1);
	bak.autocomplete = 1;
	struct ibv_sge s = {.addr = 0x1000, .length = 8, .lkey = 0x10}, sb = s;
	sb.lkey = 0x20;
	struct ibv_send_wr w = {.wr_id = 1, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &s, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED}, wb = w;
	w.wr.rdma.rkey = 0x30;
	wb.sg_list = &sb;
	wb.wr.rdma.rkey = 0x40;
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	double best[3][2] = {{1e18, 1e18}, {1e18, 1e18}, {1e18, 1e18}}; /* [direct, lane, recording][post, poll] */
	for (int r = 0; r < rounds; r++) {
		for (int mode = 0; mode < 3; mode++) {
			if (mode) {
				lip_express_off(lq);
				lip_express_on(lq, lanes[mode]);
			}
			double tp = 0, tc = 0;
			for (long i = 0; i < n; i += 1000) {
				double t0 = now_ns();
				for (int j = 0; j < 1000; j++)
					mode ? app.ctx.ops.post_send(&qp, &w, &bad) : bak.ctx.ops.post_send(&bqp, &wb, &bad);
				double t1 = now_ns();
				for (int j = 0; j < 1000; j++)
					mode ? app.ctx.ops.poll_cq(&acq, 1, &wc) : bak.ctx.ops.poll_cq(&bcq, 1, &wc);
				tc += now_ns() - t1;
				tp += t1 - t0;
			}
			if (tp / n < best[mode][0])
				best[mode][0] = tp / n;
			if (tc / n < best[mode][1])
				best[mode][1] = tc / n;
		}
	}
	printf("post_send direct_ns %.2f lane_ns %.2f added_ns %.2f\n", best[0][0], best[1][0], best[1][0] - best[0][0]);
	printf("poll_cq direct_ns %.2f lane_ns %.2f added_ns %.2f\n", best[0][1], best[1][1], best[1][1] - best[0][1]);
	printf("post_send_recording lane_ns %.2f recording_ns %.2f added_ns %.2f\n", best[1][0], best[2][0], best[2][0] - best[1][0]);
	printf("poll_cq_recording lane_ns %.2f recording_ns %.2f added_ns %.2f\n", best[1][1], best[2][1], best[2][1] - best[1][1]);
	return 0;
}

/* A CQ on the lane whose application waits for its event (channel.c)
 * arms the backup CQs behind it: their events wake the application. */
static int arm_b, arm_br, arm_a;

static int arm_refuse; /* the provider refuses the next arms */

static int stub_notify(struct ibv_cq *cq, int solicited)
{
	if (cq == &bcq)
		arm_b++;
	else if (cq == &brcq)
		arm_br++;
	else if (cq == &acq)
		arm_a++;
	return arm_refuse ? EINVAL : 0;
}

static void check_arm(void)
{
	bak.ctx.ops.req_notify_cq = stub_notify;
	int p[2];
	if (pipe(p)) {
		perror("pipe");
		exit(2);
	}
	struct ibv_comp_channel real = {.context = &app.ctx, .fd = p[0]};
	struct ibv_comp_channel *ch = lip_chan_new(&real);
	CHECK(ch != NULL, "lip_chan_new");
	lip_chan_cq_created(&acq, ch);
	struct lip_qp *qs[1] = {lq};
	lip_express_cq(&acq, NULL, 0);
	lip_express_on(lq, lip_xl_new(&bqp, &bcq, &brcq, 0x77));
	CHECK(lip_express_cq(&acq, qs, 1) == 0 && arm_b == 0 && arm_br == 0, "nothing armed while the application does not wait");
	lip_express_cq(&acq, NULL, 0);
	lip_chan_arm(&acq);
	CHECK(lip_express_cq(&acq, qs, 1) == 0 && arm_b == 1 && arm_br == 1,
	      "a CQ the application armed arms its backup CQs as it goes on the lane: %d %d", arm_b, arm_br);
	lip_express_arm(&acq);
	CHECK(arm_b == 2 && arm_br == 2, "arming the lane CQ: %d %d", arm_b, arm_br);
	arm_refuse = 1;
	lip_express_arm(&acq);
	arm_refuse = 0;
	CHECK(dump_has("own 0 arms 6 refused 2"), "lane dump: arms, the refused ones");
	/* the application's own arm (lip_req_notify_cq): its CQ, then the
	 * lane's; in a child forked without exec, its CQ alone */
	lip_ctx_of(&app.ctx)->req_notify_cq = stub_notify;
	CHECK(lip_req_notify_cq(&acq, 0) == 0 && arm_a == 1 && arm_b == 4 && arm_br == 4,
	      "the application's arm of a lane CQ: %d %d %d", arm_a, arm_b, arm_br);
	lip_child = 1;
	CHECK(lip_req_notify_cq(&acq, 0) == 0 && arm_a == 2 && arm_b == 4 && arm_br == 4,
	      "a forked child's arm of an inherited lane CQ reaches its provider alone: %d %d %d", arm_a, arm_b, arm_br);
	lip_child = 0;
	lip_express_off(lq);
	lip_express_arm(&acq);
	CHECK(arm_b == 4 && arm_br == 4, "a QP off the lane: its backup is not armed: %d %d", arm_b, arm_br);
	lip_express_cq(&acq, NULL, 0);
}

/* sq_at / rq_at: the send / receive ring entry at position k */
static struct lip_sqe *sq_at(uint64_t k) { return &lq->sq[k & lq->smask]; }
static struct lip_rqe *rq_at(uint64_t k) { return &lq->rq[k & lq->rmask]; }

/* check_record: a lane with record (the switch back on) keeps the QP's
 * rings: loaded as it goes on, each WR it posts recorded (one the backup
 * refuses void), each successful completion it hands over retired, the
 * control messages and errors retiring nothing; a lane without record
 * touches no ring: its posts are not recorded, and its completions do
 * not retire what the rings hold. */
static void check_record(void)
{
	struct ibv_wc wc[16];
	struct lip_qp *qs[1] = {lq};
	struct ibv_sge ls = {.addr = 0x1000, .length = 8, .lkey = 0x10};
	/* without record: rings holding a signaled send and a receive (as a
	 * divert leaves them), which its completions on the lane leave be */
	struct ibv_send_wr held = {.wr_id = 92, .opcode = IBV_WR_SEND, .sg_list = &ls, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_recv_wr heldr = {.wr_id = 93, .sg_list = &ls, .num_sge = 1};
	CHECK(lip_rings_load(lq, &held, &heldr) == 0, "lip_rings_load");
	uint64_t sh = lq->shead, rh = lq->rhead, st = lq->stail, rt = lq->rtail;
	uint64_t nd = lq->notifs_done, rd = lq->recvs_done;
	lip_express_on(lq, lane());
	hook_fixes = 1;
	CHECK(post1(90, IBV_WR_SEND, 0x10, 8, 0, IBV_SEND_SIGNALED) == 0 && lq->shead == sh && lq->rhead == rh,
	      "a lane without record moved the rings: %lu %lu", (unsigned long)(lq->shead - sh), (unsigned long)(lq->rhead - rh));
	struct ibv_recv_wr orw = {.wr_id = 91, .sg_list = &ls, .num_sge = 1}, *orbad = NULL;
	CHECK(app.ctx.ops.post_recv(&qp, &orw, &orbad) == 0 && lq->rhead == rh,
	      "a lane receive without record moved the receive ring: %lu", (unsigned long)(lq->rhead - rh));
	CHECK(lip_express_cq(&acq, qs, 1) == 0, "lip_express_cq");
	complete(&bak, 90, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_SEND, 0);
	complete(&bak, 91, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0);
	int got = 0;
	for (int i = 0; i < 4; i++)
		got += app.ctx.ops.poll_cq(&acq, 16 - got, wc + got);
	CHECK(got == 2 && lq->stail == st && lq->rtail == rt && lq->notifs_done == nd && lq->recvs_done == rd,
	      "completions on a lane without record retired: got %d, sends %lu, receives %lu", got,
	      (unsigned long)(lq->stail - st), (unsigned long)(lq->rtail - rt));
	lip_express_cq(&acq, NULL, 0);
	lip_express_off(lq);

	/* loaded as the QP goes on the lane, an inline WR's payload with it
	 * (copied from its SGEs, as Rings.Inline gives it) */
	struct lip_xl *x = lane();
	char lpay[8] = "loaded!";
	struct ibv_sge lis = {.addr = (uintptr_t)lpay, .length = 8, .lkey = 0};
	struct ibv_send_wr loaded[2] = {
		{.wr_id = 60, .opcode = IBV_WR_SEND, .sg_list = &ls, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED, .next = &loaded[1]},
		{.wr_id = 67, .opcode = IBV_WR_SEND, .sg_list = &lis, .num_sge = 1, .send_flags = IBV_SEND_INLINE},
	};
	struct ibv_recv_wr lr = {.wr_id = 61, .sg_list = &ls, .num_sge = 1};
	CHECK(lip_xl_record(lq, x, loaded, &lr, 5, 7) == 0 && x->record, "lip_xl_record");
	memset(lpay, 0, sizeof(lpay));
	lip_express_on(lq, x);
	uint64_t s0 = lq->stail, r0 = lq->rtail;
	CHECK(lq->shead == s0 + 2 && sq_at(s0)->wr_id == 60 && sq_at(s0 + 1)->wr_id == 67 && lq->rhead == r0 + 1 &&
	      rq_at(r0)->wr_id == 61 && lq->notifs_done == 5 && lq->recvs_done == 7,
	      "loaded: %lu sends, %lu receives, counters %lu %lu", (unsigned long)(lq->shead - s0),
	      (unsigned long)(lq->rhead - r0), (unsigned long)lq->notifs_done, (unsigned long)lq->recvs_done);
	CHECK(sq_at(s0 + 1)->inline_len == 8 && memcmp(lq->inl + ((s0 + 1) & lq->smask) * lq->inl_max, "loaded!", 8) == 0,
	      "the loaded inline WR's payload: %u bytes", sq_at(s0 + 1)->inline_len);
	CHECK(lip_xl_record(lq, lane(), NULL, NULL, 0, 0) == -1 && errno == EBUSY, "lip_xl_record of a QP on the lane");

	/* posts recorded, the application's WR with its own keys; the
	 * backup refuses the second of a chain: it is void */
	CHECK(post1(62, IBV_WR_RDMA_WRITE, 0x10, 8, 0x30, IBV_SEND_SIGNALED) == 0 && lq->shead == s0 + 3 && sq_at(s0 + 2)->wr_id == 62 &&
	      sq_at(s0 + 2)->sge[0].lkey == 0x10 && sq_at(s0 + 2)->rkey == 0x30 && !(sq_at(s0 + 2)->flags & LIP_SQE_VOID),
	      "a lane post recorded: head +%lu", (unsigned long)(lq->shead - s0));
	bak.refuse_wrid = 64;
	struct ibv_send_wr r[2];
	memset(r, 0, sizeof(r));
	r[0].wr_id = 63, r[1].wr_id = 64;
	r[0].opcode = r[1].opcode = IBV_WR_SEND;
	r[0].sg_list = r[1].sg_list = &ls;
	r[0].num_sge = r[1].num_sge = 1;
	r[1].send_flags = IBV_SEND_SIGNALED;
	r[0].next = &r[1];
	struct ibv_send_wr *bad = NULL;
	CHECK(app.ctx.ops.post_send(&qp, r, &bad) == ENOMEM && bad == &r[1], "refusal on a recording lane");
	bak.refuse_wrid = 0;
	CHECK(lq->shead == s0 + 5 && !(sq_at(s0 + 3)->flags & LIP_SQE_VOID) && (sq_at(s0 + 4)->flags & LIP_SQE_VOID),
	      "the refused WR is void, the one before it not");
	/* an inline WR: its payload copied by the post (the application may
	 * reuse its buffer once the post returns) */
	char pay[8] = "inline!";
	struct ibv_sge is = {.addr = (uintptr_t)pay, .length = 8, .lkey = 0xdead};
	struct ibv_send_wr iw = {.wr_id = 66, .opcode = IBV_WR_SEND, .sg_list = &is, .num_sge = 1, .send_flags = IBV_SEND_INLINE};
	bad = NULL;
	CHECK(app.ctx.ops.post_send(&qp, &iw, &bad) == 0, "inline post on a recording lane");
	memset(pay, 0, sizeof(pay));
	CHECK(lq->shead == s0 + 6 && sq_at(s0 + 5)->wr_id == 66 && sq_at(s0 + 5)->inline_len == 8 &&
	      !(sq_at(s0 + 5)->flags & (LIP_SQE_PARTIAL | LIP_SQE_VOID)) &&
	      memcmp(lq->inl + ((s0 + 5) & lq->smask) * lq->inl_max, "inline!", 8) == 0,
	      "the lane's inline WR recorded with its payload: %u bytes, flags %#x", sq_at(s0 + 5)->inline_len,
	      sq_at(s0 + 5)->flags);
	struct ibv_recv_wr rw = {.wr_id = 65, .sg_list = &ls, .num_sge = 1};
	struct ibv_recv_wr *rbad = NULL;
	CHECK(app.ctx.ops.post_recv(&qp, &rw, &rbad) == 0 && lq->rhead == r0 + 2 && rq_at(r0 + 1)->wr_id == 65 &&
	      rq_at(r0 + 1)->sge[0].lkey == 0x10, "a lane receive recorded");

	/* completions on the lane retire; control messages do not */
	CHECK(lip_express_cq(&acq, qs, 1) == 0, "lip_express_cq");
	complete(&bak, 60, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_SEND, 0);
	complete(&bak, LIP_CTRL_RECV_WRID, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, htonl(2u << 30 | 5));
	complete(&bak, 61, bqp.qp_num, IBV_WC_SUCCESS, IBV_WC_RECV, 0);
	got = 0;
	for (int i = 0; i < 4; i++)
		got += app.ctx.ops.poll_cq(&acq, 16 - got, wc + got);
	CHECK(got == 2 && lq->stail == s0 + 1 && lq->notifs_done == 6 && lq->rtail == r0 + 1 && lq->recvs_done == 8,
	      "retired by the lane's completions: got %d, sends %lu, receives %lu, counters %lu %lu", got,
	      (unsigned long)(lq->stail - s0), (unsigned long)(lq->rtail - r0), (unsigned long)lq->notifs_done,
	      (unsigned long)lq->recvs_done);
	/* an error completion retires nothing (it surfaces the QP) */
	hook_surfaced = 0;
	complete(&bak, 62, bqp.qp_num, IBV_WC_REM_ACCESS_ERR, IBV_WC_RDMA_WRITE, 0);
	got = app.ctx.ops.poll_cq(&acq, 16, wc);
	CHECK(got == 1 && hook_surfaced == 1 && lq->stail == s0 + 1, "an error retired %lu", (unsigned long)(lq->stail - s0 - 1));
	lip_express_cq(&acq, NULL, 0);
	lip_express_off(lq);
}

/* check_dump: lip_qp_dump (lip_debug_state) names the QP with what its
 * rings hold: the sends and receives posted and retired, the oldest
 * outstanding of each. */
static void check_dump(void)
{
	struct ibv_sge ls = {.addr = 0x1000, .length = 8, .lkey = 0x10};
	struct ibv_send_wr s = {.wr_id = 0x77, .opcode = IBV_WR_SEND, .sg_list = &ls, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_recv_wr r = {.wr_id = 0x78, .sg_list = &ls, .num_sge = 1};
	CHECK(lip_rings_load(lq, &s, &r) == 0, "lip_rings_load");
	FILE *f = tmpfile();
	CHECK(f != NULL, "tmpfile");
	if (!f)
		return;
	lip_qp_dump(fileno(f));
	char out[4096] = {0}, want[256];
	rewind(f);
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	snprintf(want, sizeof(want), "qp %#x: armed %d diverted %d express %d sends %llu retired %llu recvs %llu retired %llu",
		 lq->qpn, lq->armed, lq->diverted, lq->express, (unsigned long long)lq->shead,
		 (unsigned long long)lq->stail, (unsigned long long)lq->rhead, (unsigned long long)lq->rtail);
	CHECK(n > 0 && strstr(out, want) && strstr(out, "oldest send wr_id 0x77 opcode 2 flags 0x2") &&
		      strstr(out, "oldest recv wr_id 0x78"),
	      "lip_qp_dump wrote %zu bytes:\n%s\nwant the line with\n%s", n, out, want);
}

int main(int argc, char **argv)
{
	setup();
	if (argc > 1 && strcmp(argv[1], "bench") == 0) {
		CHECK(lip_divert(lq) == 0, "divert");
		return bench(argc > 2 ? atol(argv[2]) : 2000000, argc > 3 ? atoi(argv[3]) : 5);
	}
	check_posts();
	check_polls();
	check_refusal_and_off();
	check_keys();
	check_arm();
	check_record();
	check_dump();
	printf(fails ? "FAIL\n" : "PASS\n");
	return fails != 0;
}
