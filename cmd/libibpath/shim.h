/* libibpath: the C side of the LD_PRELOAD shim. The interposed control
 * verbs (interpose.c) forward to libibverbs and tell the Go side; the
 * Default-state hot path (hotpath.c) swaps each context's post_send,
 * post_recv and poll_cq for wrappers that record every work request in a
 * per-QP shadow ring without allocating, then call the provider. */
#ifndef LIBIBPATH_SHIM_H
#define LIBIBPATH_SHIM_H

#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include "qlock.h"

#define LIP_MAX_SGE 4       /* SGEs kept per shadow entry; more marks the entry partial */
#define LIP_MAX_CTX 64      /* open device contexts tracked */
#define LIP_QP_SLOTS 4096   /* QPs per context (open addressing on qp_num) */
#define LIP_PTR_SLOTS 16384 /* QPs of the process (open addressing on the ibv_qp address) */
#define LIP_MAX_INLINE 1024 /* inline bytes kept per shadow entry; more marks the entry partial */
#define LIP_DCQ_SLOTS 1024  /* diverted CQs (open addressing on the ibv_cq address) */
#define LIP_MAX_CHAN 256    /* completion channels of the application wrapped (channel.c) */
#define LIP_CHAN_CQS 4096   /* CQs on those channels (open addressing on the ibv_cq address) */
#define LIP_SRQ_SLOTS 1024  /* SRQs of the process followed (open addressing on the ibv_srq address) */

/* A send work request as recorded for replay. */
struct lip_sqe {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t opcode;
	uint32_t send_flags;
	uint32_t imm;
	uint32_t rkey;
	uint32_t num_sge;
	uint32_t flags;         /* LIP_SQE_* */
	uint32_t inline_len;    /* bytes copied to the QP's inline area */
	struct ibv_sge sge[LIP_MAX_SGE];
};

#define LIP_SQE_VOID    1u  /* the provider refused it: never posted */
#define LIP_SQE_PARTIAL 2u  /* more SGEs than kept: cannot be replayed */
#define LIP_RQE_DONE    4u  /* an SRQ receive retired out of order (srq.c) */

struct lip_rqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t flags;
	struct ibv_sge sge[LIP_MAX_SGE];
};

/* One protected QP: its shadow rings. Heads are advanced by posters
 * (under slock / rlock: several threads may post to one QP), tails and
 * the counters by pollers (under stlock / rtlock: several threads may
 * poll one CQ). */
struct lip_qp {
	struct ibv_qp *qp;
	struct lip_ctx *ctx;
	uint32_t qpn;
	int sig_all;
	uint32_t smask, rmask;  /* ring sizes - 1 (powers of two) */
	uint64_t shead, stail;  /* send ring: posted, retired */
	/* layer 1's nudge (nudge.c), beside stail: a retirement reads them */
	uint64_t nudge_mark;    /* 0, or 1 + the send ring's head when a nudge was posted */
	int sends_polled;       /* a send completion of it went through the shim's polls */
	uint64_t rhead, rtail;  /* receive ring */
	uint64_t overflow;      /* entries overwritten before retirement */
	uint64_t notifs_done;   /* retired sends that consume a peer receive */
	uint64_t recvs_done;    /* retired receives */
	struct lip_sqe *sq;
	struct lip_rqe *rq;
	uint32_t inl_max;       /* inline bytes kept per send entry */
	uint8_t *inl;           /* (smask+1) * inl_max bytes */
	struct ibv_cq *send_cq, *recv_cq;
	struct lip_blk slock, rlock;   /* serialise posters of the send / receive queue */
	struct lip_blk stlock, rtlock; /* serialise pollers retiring send / receive entries */
	int armed;              /* layer 2 can take over: error completions go to it */
	int diverted;           /* layer 2 took over: posts and polls go to it */
	int express;            /* diverted, and on the express lane (express.c) */
	struct lip_xl *xl;      /* the express lane, set before express */
	struct lip_wrb *wrb;    /* the ibv_wr_* batch of a QP posting through that API (wrapi.c) */
	/* layer 1's nudge (nudge.c) */
	int nudge_slot;         /* created with one send WR more than the application was told */
	int dead;               /* destroyed: never nudged again (under slock) */
	struct lip_srq *srq;    /* receives through this followed SRQ (NULL: its own queue) */
	int holds;              /* the Go side's lip_qp_hold, not released yet */
	struct lip_qp *held_next; /* freed while held: waiting for the last release */
};

#define LIP_SLOT_DEAD ((struct lip_qp *)1)

/* An SRQ of the application that layer 2 follows: its shadow ring of
 * receives (srq.c). head is advanced by posters (under plock), tail by
 * retirers (under tlock); an entry retired out of order is marked
 * LIP_RQE_DONE and tail moves past such entries. */
struct lip_srq {
	struct ibv_srq *srq;
	struct lip_ctx *ctx;
	uint32_t mask;          /* ring size - 1 (a power of two) */
	uint64_t head, tail;
	uint64_t overflow;      /* posts that overran the ring */
	struct lip_rqe *rq;
	struct lip_blk plock, tlock;
	int diverted;           /* layer 2 took its receives: posts go to it */
};

/* Destroys under way on one context whose QP's successes a poll still
 * retires (lip_qp_destroying); more pass the hot path by. */
#define LIP_DESTROYING 8

struct lip_ctx {
	struct ibv_context *ctx;
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	/* the provider's req_notify_cq, when swapped (lip_channels) */
	int (*req_notify_cq)(struct ibv_cq *, int);
	/* the provider's verbs_context create_qp_ex and create_cq_ex, when
	 * swapped (interpose.c) */
	struct ibv_qp *(*create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
	struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *, struct ibv_cq_init_attr_ex *);
	int nudge;              /* RC QPs get a send slot for layer 1's nudge (nudge.c; set by the Go side) */
	pthread_mutex_t mu;     /* serialises inserts into slots */
	struct lip_qp *slots[LIP_QP_SLOTS];
	/* QPs out of slots for a destroy the provider has not answered yet
	 * (lip_qp_destroying): their successes are still retired */
	struct lip_qp *destroying[LIP_DESTROYING];
};

/* One thread that entered the hot path: seq is odd while it is inside a
 * post or poll. Layer 2 waits for odd sequences to move before it reads
 * the rings of a QP it diverts (divert.c). */
struct lip_thr {
	uint64_t seq;
	int free;
	struct lip_thr *next;
};

/* lip_ptr_hash is the slot of a pointer in an open-addressing table of
 * slots entries (a power of two): Fibonacci hashing of its address. */
static inline uint32_t lip_ptr_hash(const void *p, uint32_t slots)
{
	return (uint32_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (slots - 1);
}

extern __thread struct lip_thr *lip_me __attribute__((tls_model("initial-exec")));
extern int lip_fence;       /* no membarrier(2): the hot path fences itself */
struct lip_thr *lip_thr_register(void);
extern void *(*lip_thr_calloc)(size_t, size_t);

/* lip_child is 1 in a child forked without exec (interpose.c): the shim
 * passes every verb there straight through, and enters neither its hot
 * path's bookkeeping nor its Go side. The ibpath_faultinject build ends
 * such a child that enters the hot path anyway (exit 97, as its Go side
 * does: inject_on.go), so that an entry that happens not to hang is seen. */
extern int lip_child;
#ifdef LIP_FAULTINJECT
void lip_child_entered(const char *where);
#define LIP_CHILD_CHECK(where)                         \
	do {                                           \
		if (__builtin_expect(lip_child, 0))    \
			lip_child_entered(where);      \
	} while (0)
#else
#define LIP_CHILD_CHECK(where) \
	do {                   \
	} while (0)
#endif

static inline struct lip_thr *lip_enter(void)
{
	LIP_CHILD_CHECK("the hot path");
	struct lip_thr *t = lip_me;
	if (__builtin_expect(!t, 0))
		t = lip_thr_register();
	__atomic_store_n(&t->seq, t->seq + 1, __ATOMIC_RELAXED);
	if (lip_fence)
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	else
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return t;
}

static inline void lip_leave(struct lip_thr *t)
{
	__atomic_store_n(&t->seq, t->seq + 1, __ATOMIC_RELEASE);
}

/* What layer 2 does for a diverted QP or CQ (set by the shim's Go side;
 * stubs in the C checks). */
struct lip_hooks {
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	/* an error completion of an armed QP, then the rest of its batch */
	void (*intercept)(struct ibv_cq *, struct ibv_wc *, int);
	/* an express QP surfaced its error: the completion that made it */
	void (*surfaced)(struct ibv_qp *, struct ibv_wc *);
	int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
};
extern struct lip_hooks lip_hooks;

/* A hook's answer (post or poll): the QP or CQ moved to the express lane
 * meanwhile, dispatch the call again. Never a verbs return value. */
#define LIP_AGAIN (-0x4c4950)
/* A post hook's answer: layer 2 gave the QP back to the hot path
 * (lip_undivert) while the post was on its way; nothing of what the hook
 * was given was posted. The hot path posts those WRs itself, recorded.
 * Never a verbs return value. */
#define LIP_HOME (-0x4c4951)
/* ibpathModify's answer when the Go side failed (a panic it recovered,
 * cmd/libibpath/guard.go): the modify was not made, the C side makes it
 * as the application wrote it. Never a verbs return value. */
#define LIP_GUARDED (-0x4c4952)

/* Layer 2's control WRs and immediates (crossnic): LIP_CTRL_*. */
#include "ctrl.h"

/* A key translation table: default key -> backup key. Insert-only
 * open addressing; readers need no lock (used is stored last). */
struct lip_key {
	uint32_t used, from, to;
};
struct lip_keytab {
	uint32_t mask, n;
	struct lip_key e[];
};

/* The express lane of one diverted QP whose failover settled on the
 * backup (steady Fallback): its posts and the polls of its CQs run here,
 * in C, straight on the backup QP (express.c). */
struct lip_xl {
	struct ibv_qp *bqp;
	struct ibv_cq *bcq, *brcq;      /* backup CQs of the send and receive queues */
	int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
	int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
	int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
	uint32_t peer_qpn;              /* the peer's default QP: src_qp of receives */
	struct lip_keytab *lk, *rk;     /* local lkeys, the peer's rkeys */
	int surfaced;                   /* the backup failed too: plain verbs on the default QP */
	/* record: the lane keeps the QP's shadow rings (lip_xl_record), so
	 * that layer 2 can take the QP off the lane for a switch back */
	int record;
	uint64_t sends, recvs, completions, hidden, misses;
	/* for lip_xl_dump: layer 2's own completions dropped; backup CQ
	 * arms requested, refused */
	uint64_t own, arms, arm_errs;
};

#define LIP_XL_WRS 16       /* WRs per express post chunk */
#define LIP_XL_SGE 64       /* SGEs per express post chunk (and per WR) */
#define LIP_XCQ_QPS 16      /* express QPs completing into one CQ */

/* An application CQ on the express lane: the QPs whose backup CQs its
 * polls drain. Immutable once published (replaced whole). */
struct lip_xcq {
	struct ibv_cq *cq;
	int n;
	struct lip_qp *q[LIP_XCQ_QPS];
};

/* express.c */
struct lip_xl *lip_xl_new(struct ibv_qp *bqp, struct ibv_cq *bcq, struct ibv_cq *brcq, uint32_t peer_qpn);
void lip_xl_free(struct lip_xl *x);
int lip_xl_key(struct lip_xl *x, int remote, uint32_t from, uint32_t to);
int lip_xl_lookup(struct lip_xl *x, int remote, uint32_t from, uint32_t *to);
int lip_xl_record(struct lip_qp *q, struct lip_xl *x, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs,
		  uint64_t notifs_done, uint64_t recvs_done);
void lip_express_on(struct lip_qp *q, struct lip_xl *x);
void lip_express_off(struct lip_qp *q);
void lip_express_surface(struct lip_qp *q);
int lip_express_cq(struct ibv_cq *cq, struct lip_qp **qs, int n);
/* a diverted QP's posts: LIP_HOME with *bad the first WR not posted when
 * layer 2 gave the QP back meanwhile (the caller posts from it) */
int lip_diverted_post_send(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int lip_diverted_post_recv(struct lip_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int lip_diverted_poll_cq(struct lip_ctx *c, struct ibv_cq *cq, int n, struct ibv_wc *wc);
void lip_express_arm(struct ibv_cq *cq);
void lip_xl_dump(int fd);
void lip_qp_dump(int fd);

/* channel.c */
extern int lip_channels;    /* 1: the application's completion channels are wrapped */
extern int lip_cq_headroom; /* entries added to each application CQ (interpose.c) */
struct ibv_comp_channel *lip_chan_new(struct ibv_comp_channel *real);
struct ibv_comp_channel *lip_chan_real(struct ibv_comp_channel *ch);
int lip_chan_destroy(struct ibv_comp_channel *ch, int (*destroy)(struct ibv_comp_channel *));
void lip_chan_cq_created(struct ibv_cq *cq, struct ibv_comp_channel *ch);
int lip_chan_cq_destroy(struct ibv_cq *cq, int (*destroy)(struct ibv_cq *));
int lip_chan_arm(struct ibv_cq *cq);
int lip_chan_armed(struct ibv_cq *cq);
int lip_chan_wake(struct ibv_cq *cq);
void lip_chan_dump(int fd);
int lip_chan_get_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx,
		       int (*get)(struct ibv_comp_channel *, struct ibv_cq **, void **));
int lip_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* divert.c */
extern int lip_ndcq;        /* diverted CQs; 0 keeps polls off the table */
int lip_cq_diverted(struct ibv_cq *cq);
void lip_qp_arm(struct lip_qp *q, int armed);
int lip_divert(struct lip_qp *q);
int lip_undivert(struct lip_qp *q, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs,
		 uint64_t notifs_done, uint64_t recvs_done);
void lip_release_cq(struct ibv_cq *cq);
void lip_quiesce(void);
int lip_membarrier_active(void);
void lip_retire_wc(struct lip_ctx *c, const struct ibv_wc *wc);

/* hotpath.c */
struct lip_ctx *lip_ctx_add(struct ibv_context *ctx);
void lip_ctx_remove(struct ibv_context *ctx);
struct lip_ctx *lip_ctx_of(struct ibv_context *ctx);
struct lip_qp *lip_qp_add(struct ibv_qp *qp, const struct ibv_qp_init_attr *attr);
/* lip_qp_remove takes qp out of the tables and returns its lip_qp (NULL
 * when it had none), which lip_qp_free frees once layer 2 let go of it. */
struct lip_qp *lip_qp_remove(struct ibv_qp *qp);
/* lip_qp_restore undoes lip_qp_remove after a failed destroy (-1: it
 * could not; q is to be freed) */
int lip_qp_restore(struct lip_qp *q);
/* lip_qp_destroying registers (on) or forgets q, taken out of the tables
 * by lip_qp_remove for a destroy the provider has not answered yet */
void lip_qp_destroying(struct lip_qp *q, int on);
void lip_qp_free(struct lip_qp *q);
struct lip_qp *lip_qp_find(struct lip_ctx *c, uint32_t qpn);
/* lip_qp_hold is QP qpn of the application's context ctx (NULL: none),
 * held for the Go side until lip_qp_unhold: looked up inside the hot
 * path's quiesce protocol, so that a destroy frees it only after every
 * hold taken before its removal was released. */
struct lip_qp *lip_qp_hold(struct ibv_context *ctx, uint32_t qpn);
void lip_qp_unhold(struct lip_qp *q);
/* lip_qp_freed_hook, when set (the C checks), sees each lip_qp freed */
extern void (*lip_qp_freed_hook)(struct lip_qp *);
int lip_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int lip_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int lip_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
/* outstanding entries of a QP (posted, not retired) */
void lip_qp_outstanding(struct lip_qp *q, uint64_t *send, uint64_t *recv);
void lip_qp_progress(struct lip_qp *q, uint64_t *posted, uint64_t *retired);
/* for lip_undivert: the rings of a diverted QP hold exactly these WRs */
int lip_rings_load(struct lip_qp *q, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs);
/* for the express lane's recording (express.c): the k WRs of a chain
 * from wr recorded as the hot path records a post (the first position
 * returned); of the k recorded from position from, the WR refused and
 * those after it marked void; a successful completion retired; the
 * receive queue's posters serialised */
uint64_t lip_ring_sends(struct lip_qp *q, const struct ibv_send_wr *wr, int k);
void lip_ring_sends_void(struct lip_qp *q, uint64_t from, const struct ibv_send_wr *wr, int k,
			 const struct ibv_send_wr *refused);
uint64_t lip_ring_recvs(struct lip_qp *q, const struct ibv_recv_wr *wr, int k);
void lip_ring_recvs_void(struct lip_qp *q, uint64_t from, const struct ibv_recv_wr *wr, int k,
			 const struct ibv_recv_wr *refused);
void lip_ring_retire(struct lip_qp *q, const struct ibv_wc *wc);
void lip_qp_rlock(struct lip_qp *q);
void lip_qp_runlock(struct lip_qp *q);

/* srq.c */
struct lip_srq *lip_srq_of(struct ibv_srq *srq);
struct lip_srq *lip_srq_add(struct ibv_srq *srq, uint32_t max_wr);
void lip_srq_remove(struct ibv_srq *srq);
int lip_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int lip_srq_retire(struct lip_srq *s, uint64_t wr_id);
int lip_srq_divert(struct lip_srq *s);
void lip_srq_drop_ctx(struct lip_ctx *c);

/* nudge.c */
int lip_nudge(struct lip_qp *q);
void lip_ctx_nudge(struct lip_ctx *c, int on);
int lip_nudge_pad(struct lip_ctx *c, const struct ibv_qp_init_attr *attr);
void lip_nudge_created(struct lip_qp *q, int padded);
void lip_nudge_done(struct lip_qp *q, uint64_t stail);
void lip_nudge_forget(struct lip_qp *q);
void lip_nudge_revive(struct lip_qp *q);
int lip_nudge_drop(struct lip_ctx *c, struct ibv_wc *wc, int n);

/* lip_nudge_wc says whether wc, an error completion of q, is layer 1's
 * nudge, which no one above the shim may see (it clears the nudge's mark:
 * its completion is the last thing the nudge makes). Unsignaled on a QP
 * without sq_sig_all, a nudge completes in error only: successful
 * completions need not be looked at. */
static inline int lip_nudge_wc(struct lip_qp *q, const struct ibv_wc *wc)
{
	uint64_t m = __atomic_load_n(&q->nudge_mark, __ATOMIC_ACQUIRE);
	if (__builtin_expect(m == 0, 1) || wc->wr_id != LIP_NUDGE_WRID)
		return 0;
	__atomic_compare_exchange_n(&q->nudge_mark, &m, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	return 1;
}

/* lip_nudge_fault says whether a nudge's error completion wc (lip_nudge_wc
 * said it is one) is the fault of an armed QP that layer 2 has not taken
 * yet: an error other than a flush (RETRY_EXC_ERR: the new path does not
 * answer either) is the first sign of it. Dropped, it would leave layer
 * 2 with the flushes of the application's WRs that follow, and a flush
 * with no error before it is not a fault (crossnic's errorIsFault): the
 * error would reach the application. It goes to layer 2 as the QP's
 * first error instead, which never gives it to the application. */
static inline int lip_nudge_fault(struct lip_qp *q, const struct ibv_wc *wc)
{
	return wc->status != IBV_WC_WR_FLUSH_ERR && __atomic_load_n(&q->armed, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&q->diverted, __ATOMIC_ACQUIRE);
}

/* cqex.c */
void lip_cqex_follow(struct ibv_cq_ex *cq);
int lip_cqex_forget(struct ibv_cq *cq);
extern int lip_cqex_unpolled;
void lip_cqex_polled(struct ibv_cq *cq);
void lip_tell_cq_extended(struct ibv_cq *cq);
void lip_tell_cq_polled(struct ibv_cq *cq);
/* interpose.c, for cqex.c: the Go side hears of a CQ's first ibv_start_poll */
void lip_tell_start_poll(struct ibv_cq *cq);

/* wrapi.c */
struct lip_wrb;
int lip_wr_follows(uint64_t send_ops_flags);
int lip_wr_attach(struct lip_qp *q, struct ibv_qp_ex *qpx, const struct ibv_qp_cap *cap);
void lip_wr_free(struct lip_wrb *b);
int lip_wr_issue(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
/* hotpath.c, for wrapi.c */
int lip_wr_post(struct lip_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
void lip_qp_lock(struct lip_qp *q);
void lip_qp_unlock(struct lip_qp *q);
struct lip_qp *lip_qp_of(struct ibv_qp *qp);
/* lip_table_use: live entries and tombstones of the process's QP table
 * ([0]) and of c's ([1]) */
void lip_table_use(struct lip_ctx *c, uint32_t *live, uint32_t *dead);
extern uint64_t lip_qp_gen; /* bumped by lip_qp_remove */

/* frontlink.c: the definition of name@version after the shim (the
 * front's lookup when the front loaded the core, else RTLD_NEXT); and the
 * front's dlopen counts, -1 without a front, else whether its dlopen hook
 * is built */
void *lip_next(const char *name, const char *version);
int lip_front_dlopen(long *redirected, long *foreign);

/* interpose.c */
extern int lip_enabled;     /* 0: pure pass-through (IBPATH_DISABLE=1) */
extern int lip_record;      /* 1: shadow rings on (layer 2 bookkeeping) */
extern int lip_single_poster; /* 1: each QP is posted to by one thread at a time */
extern int lip_single_poller; /* 1: each CQ is polled by one thread at a time */

#endif
