/* Layer 1's nudge (apm.Config.Nudge, docs/APM.md): right after a
 * migration ibpath made, a zero-length RDMA WRITE, unsignaled, goes out on
 * the application's QP. It leaves at once on the new path with MigReq, so
 * the peer follows at once, and its PSN is past what the dead path took,
 * so the peer's sequence NAK makes the HCA resend the WRs in flight now
 * instead of at its next local ACK timeout (67 ms at timeout 14).
 *
 * The WR must not change what the application sees:
 * - its slot: a QP that may be nudged is created with one send WR more
 *   than the application asked for, and the application is told the
 *   provider's capacity less that one (lip_nudge_pad, lip_nudge_created).
 *   At most one nudge is out at a time: it leaves the send queue when a
 *   signaled WR posted after it completes (its slot is freed by the same
 *   completion), which the shadow ring's tail says;
 * - its completion: unsignaled, it makes none unless the QP fails while
 *   it is out, and then its flush is dropped wherever the shim polls the
 *   QP's CQ (lip_nudge_wc; the Go side for diverted CQs). An error of its
 *   own (RETRY_EXC_ERR: the new path failed too) on an armed QP goes to
 *   layer 2 as the QP's fault (lip_nudge_fault), never to the
 *   application. Only QPs
 *   without sq_sig_all are nudged, and only once one of their send
 *   completions went through the shim's polls (a CQ polled with
 *   ibv_start_poll never does);
 * - its order: it is posted under the send queue's lock, between two of
 *   the application's posts, and is not recorded in the shadow ring (a
 *   failover replays nothing of it). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "shim.h"

/* lip_ctx_nudge turns the send slot on for c's QPs created from now on
 * (the Go side: layer 1 and the nudge on, a port that is InfiniBand). */
void lip_ctx_nudge(struct lip_ctx *c, int on) { __atomic_store_n(&c->nudge, on, __ATOMIC_RELEASE); }

/* lip_nudge_pad says whether a QP created on c with attr gets the slot:
 * an RC QP without SRQ or sq_sig_all, on a context that wants it, whose
 * send queue can take one WR more. */
int lip_nudge_pad(struct lip_ctx *c, const struct ibv_qp_init_attr *attr)
{
	return c && __atomic_load_n(&c->nudge, __ATOMIC_ACQUIRE) && !lip_single_poster && lip_record &&
	       attr->qp_type == IBV_QPT_RC && !attr->srq && !attr->sq_sig_all && attr->cap.max_send_wr < UINT32_MAX;
}

/* lip_nudge_created records that q was created with the slot. */
void lip_nudge_created(struct lip_qp *q, int padded) { q->nudge_slot = padded; }

/* lip_nudge_done is called by a poller that moved q's send ring tail to
 * stail: a nudge out before the WR at stail - 1 left the send queue. */
void lip_nudge_done(struct lip_qp *q, uint64_t stail)
{
	uint64_t m = __atomic_load_n(&q->nudge_mark, __ATOMIC_ACQUIRE);
	if (m && stail >= m)
		__atomic_compare_exchange_n(&q->nudge_mark, &m, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* lip_nudge_forget: q is being destroyed (lip_qp_remove); a nudge that
 * waits for its lock never posts to it. */
void lip_nudge_forget(struct lip_qp *q)
{
	if (!q->nudge_slot)
		return;
	lip_qp_lock(q);
	q->dead = 1;
	lip_qp_unlock(q);
}

/* lip_nudge_revive undoes lip_nudge_forget: q's destroy failed. */
void lip_nudge_revive(struct lip_qp *q)
{
	if (!q->nudge_slot)
		return;
	lip_qp_lock(q);
	q->dead = 0;
	lip_qp_unlock(q);
}

/* lip_nudge_drop removes the nudges' completions from n completions of
 * c's QPs, in place, and returns how many are left (the rest of a batch
 * handed to layer 2 whole). A nudge's fault (lip_nudge_fault) stays:
 * layer 2 takes it as its QP's first error. */
int lip_nudge_drop(struct lip_ctx *c, struct ibv_wc *wc, int n)
{
	int kept = 0;
	struct lip_qp *last = NULL;
	for (int i = 0; i < n; i++) {
		if (!last || last->qpn != wc[i].qp_num)
			last = lip_qp_find(c, wc[i].qp_num);
		if (last && wc[i].status != IBV_WC_SUCCESS && lip_nudge_wc(last, &wc[i]) && !lip_nudge_fault(last, &wc[i]))
			continue;
		wc[kept++] = wc[i];
	}
	return kept;
}

/* lip_nudge posts the nudge on q. 0 when it was posted, else why not:
 * ENOSPC   created without the slot (not RC, sq_sig_all, SRQ, layer 1
 *          or the nudge off, the device's limit);
 * ENOTSUP  none of its send completions went through the shim's polls;
 * ENOENT   destroyed;
 * EBUSY    layer 2 took it over;
 * EALREADY the previous nudge is still out;
 * ENODATA  no send of the application's is in flight: its next post
 *          moves the peer, and nothing waits for a resend;
 * or the provider's refusal. Called by the Go side with none of its
 * locks held: it takes the send queue's lock, which an application
 * thread may hold across a poll (wr_start to wr_complete). */
int lip_nudge(struct lip_qp *q)
{
	if (!q->nudge_slot)
		return ENOSPC;
	if (!__atomic_load_n(&q->sends_polled, __ATOMIC_ACQUIRE))
		return ENOTSUP;
	lip_qp_lock(q);
	struct lip_thr *t = lip_enter();
	int ret;
	uint64_t head = __atomic_load_n(&q->shead, __ATOMIC_ACQUIRE);
	uint64_t tail = __atomic_load_n(&q->stail, __ATOMIC_ACQUIRE);
	uint64_t m = __atomic_load_n(&q->nudge_mark, __ATOMIC_ACQUIRE);
	if (q->dead) {
		ret = ENOENT;
	} else if (__atomic_load_n(&q->diverted, __ATOMIC_ACQUIRE)) {
		ret = EBUSY;
	} else if (m && tail < m) {
		ret = EALREADY;
	} else if (head == tail) {
		ret = ENODATA;
	} else {
		/* marked before the post: a QP in error flushes it at once,
		 * and a poller must drop that flush */
		__atomic_store_n(&q->nudge_mark, head + 1, __ATOMIC_RELEASE);
		struct ibv_send_wr wr, *bad = NULL;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = LIP_NUDGE_WRID;
		wr.opcode = IBV_WR_RDMA_WRITE;
		ret = q->ctx->post_send(q->qp, &wr, &bad);
		if (ret) {
			uint64_t mine = head + 1;
			__atomic_compare_exchange_n(&q->nudge_mark, &mine, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		}
	}
	lip_leave(t);
	lip_qp_unlock(q);
	return ret;
}
