/* Handing a QP from the hot path to layer 2, and back. Diverting sets the
 * QP's flag and puts its CQs in the diverted table; later posts to the QP
 * and polls of those CQs go to lip_hooks. Undiverting (lip_undivert) gives
 * the QP's posts back to the hot path with its rings reloaded; its CQs
 * stay diverted until layer 2 releases them. Posts and polls already past
 * the check must finish before layer 2 reads the rings: every thread in
 * the hot path has an odd sequence number (lip_enter/lip_leave), and
 * lip_quiesce waits for each odd one to move. The check and the sequence
 * store are ordered by membarrier(2) on layer 2's side (the hot path only
 * needs a compiler barrier); without membarrier the hot path fences
 * itself (lip_fence). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/membarrier.h>
#include "shim.h"

__thread struct lip_thr *lip_me __attribute__((tls_model("initial-exec")));
int lip_fence = 1; /* until membarrier is registered */
int lip_ndcq;

static struct lip_thr *threads;
static pthread_mutex_t threads_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t thr_key;
static pthread_once_t thr_once = PTHREAD_ONCE_INIT;
static int have_membarrier;

static void thr_exit(void *p)
{
	struct lip_thr *t = p;
	__atomic_store_n(&t->free, 1, __ATOMIC_RELEASE);
}

static void thr_init(void)
{
	pthread_key_create(&thr_key, thr_exit);
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0) {
		have_membarrier = 1;
		__atomic_store_n(&lip_fence, 0, __ATOMIC_RELEASE);
	}
}

/* lip_membarrier_active says whether the hot path relies on membarrier
 * (for the shim's banner and tests). */
int lip_membarrier_active(void)
{
	pthread_once(&thr_once, thr_init);
	return have_membarrier;
}

/* lip_thr_calloc allocates a thread's slot (calloc; a check replaces it
 * to make allocation fail). */
void *(*lip_thr_calloc)(size_t, size_t) = calloc;

/* Slots for threads whose own calloc failed: a thread needs one to enter
 * the hot path, and the library must not abort its host. */
#define LIP_SPARE_THR 256
static struct lip_thr spare_thr[LIP_SPARE_THR];
static int nspare_thr;

/* lip_thr_register gives the calling thread its sequence slot, reusing
 * one of an exited thread; when none is free and no memory is to be had,
 * one of the spare slots, and when those are all taken too, the thread
 * waits for a slot to be freed (a thread exits) or memory to come back. */
struct lip_thr *lip_thr_register(void)
{
	pthread_once(&thr_once, thr_init);
	pthread_mutex_lock(&threads_mu);
	struct lip_thr *t;
	for (int waited = 0;; waited++) {
		for (t = threads; t; t = t->next)
			if (__atomic_load_n(&t->free, __ATOMIC_ACQUIRE))
				break;
		if (t) {
			t->free = 0;
			break;
		}
		t = lip_thr_calloc(1, sizeof(*t));
		if (!t && nspare_thr < LIP_SPARE_THR)
			t = &spare_thr[nspare_thr++];
		if (t) {
			t->next = threads;
			__atomic_store_n(&threads, t, __ATOMIC_RELEASE);
			break;
		}
		if (waited == 0)
			fprintf(stderr, "libibpath: no memory for a thread's hot-path slot; the thread waits for one\n");
		pthread_mutex_unlock(&threads_mu);
		usleep(1000);
		pthread_mutex_lock(&threads_mu);
	}
	pthread_mutex_unlock(&threads_mu);
	pthread_setspecific(thr_key, t);
	lip_me = t;
	return t;
}

/* lip_quiesce returns once every post and poll that was inside the hot
 * path when it was called has left it. */
void lip_quiesce(void)
{
	pthread_once(&thr_once, thr_init);
	if (have_membarrier)
		syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	else
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (struct lip_thr *t = __atomic_load_n(&threads, __ATOMIC_ACQUIRE); t; t = t->next) {
		if (t == lip_me)
			continue;
		uint64_t s = __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE);
		if (!(s & 1))
			continue;
		for (int spin = 0; __atomic_load_n(&t->seq, __ATOMIC_ACQUIRE) == s; spin++)
			if (spin > 64)
				sched_yield();
	}
}

/* lip_blk_claim is the slow path of lip_blk_lock (qlock.h), for a
 * thread that is not b's owner: the first thread becomes the owner; any
 * later one revokes the bias, for good, and waits for the owner to be
 * out (the barrier is the one lip_quiesce uses). */
void lip_blk_claim(struct lip_blk *b, struct lip_thr *me)
{
	pthread_once(&thr_once, thr_init);
	struct lip_thr *o = __atomic_load_n(&b->owner, __ATOMIC_ACQUIRE);
	if (o == LIP_BLK_SHARED)
		return;
	if (!o && !__atomic_load_n(&lip_fence, __ATOMIC_ACQUIRE) &&
	    __atomic_compare_exchange_n(&b->owner, &o, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return;
	lip_spin_lock(&b->lock);
	o = __atomic_exchange_n(&b->owner, LIP_BLK_SHARED, __ATOMIC_ACQ_REL);
	if (o && o != LIP_BLK_SHARED) {
		if (have_membarrier)
			syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
		else
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
		for (int spin = 0; __atomic_load_n(&b->busy, __ATOMIC_ACQUIRE); spin++)
			if (spin > 64)
				sched_yield();
			else
				cpu_relax();
	}
	__atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
}

static struct ibv_cq *dcq[LIP_DCQ_SLOTS];
static pthread_mutex_t dcq_mu = PTHREAD_MUTEX_INITIALIZER;

#define DCQ_DEAD ((struct ibv_cq *)1)

int lip_cq_diverted(struct ibv_cq *cq)
{
	uint32_t h = lip_ptr_hash(cq, LIP_DCQ_SLOTS);
	for (uint32_t i = 0; i < LIP_DCQ_SLOTS; i++) {
		struct ibv_cq *c = __atomic_load_n(&dcq[(h + i) & (LIP_DCQ_SLOTS - 1)], __ATOMIC_ACQUIRE);
		if (!c)
			return 0;
		if (c == cq)
			return 1;
	}
	return 0;
}

/* dcq_add puts cq in the table (once: several diverted QPs may share
 * it). Called with dcq_mu held. */
static int dcq_add(struct ibv_cq *cq)
{
	uint32_t h = lip_ptr_hash(cq, LIP_DCQ_SLOTS);
	int hole = -1;
	for (uint32_t i = 0; i < LIP_DCQ_SLOTS; i++) {
		uint32_t k = (h + i) & (LIP_DCQ_SLOTS - 1);
		if (dcq[k] == cq)
			return 0;
		if (dcq[k] == DCQ_DEAD && hole < 0)
			hole = (int)k;
		if (!dcq[k]) {
			if (hole < 0)
				hole = (int)k;
			break;
		}
	}
	if (hole < 0)
		return -1;
	__atomic_store_n(&dcq[hole], cq, __ATOMIC_RELEASE);
	__atomic_add_fetch(&lip_ndcq, 1, __ATOMIC_SEQ_CST);
	return 0;
}

/* dcq_del takes cq out of the table. Called with dcq_mu held. */
static void dcq_del(struct ibv_cq *cq)
{
	uint32_t h = lip_ptr_hash(cq, LIP_DCQ_SLOTS);
	for (uint32_t i = 0; i < LIP_DCQ_SLOTS; i++) {
		uint32_t k = (h + i) & (LIP_DCQ_SLOTS - 1);
		if (!dcq[k])
			return;
		if (dcq[k] == cq) {
			__atomic_store_n(&dcq[k], DCQ_DEAD, __ATOMIC_RELEASE);
			__atomic_sub_fetch(&lip_ndcq, 1, __ATOMIC_SEQ_CST);
			return;
		}
	}
}

/* lip_release_cq gives cq back to the hot path: no diverted QP completes
 * into it any more. */
void lip_release_cq(struct ibv_cq *cq)
{
	pthread_mutex_lock(&dcq_mu);
	dcq_del(cq);
	pthread_mutex_unlock(&dcq_mu);
}

void lip_qp_arm(struct lip_qp *q, int armed)
{
	__atomic_store_n(&q->armed, armed, __ATOMIC_RELEASE);
}

/* lip_divert hands q to layer 2: returns 0 once no post or poll of it is
 * left in the hot path, -1 (errno set) when it cannot. */
int lip_divert(struct lip_qp *q)
{
	pthread_mutex_lock(&dcq_mu);
	if (q->diverted) {
		pthread_mutex_unlock(&dcq_mu);
		errno = EALREADY;
		return -1;
	}
	int had_send = lip_cq_diverted(q->send_cq);
	if (dcq_add(q->send_cq)) {
		pthread_mutex_unlock(&dcq_mu);
		errno = ENOSPC;
		return -1;
	}
	if (q->recv_cq != q->send_cq && dcq_add(q->recv_cq)) {
		if (!had_send)
			dcq_del(q->send_cq); /* a failed divert diverts nothing */
		pthread_mutex_unlock(&dcq_mu);
		errno = ENOSPC;
		return -1;
	}
	__atomic_store_n(&q->diverted, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&dcq_mu);
	lip_quiesce();
	return 0;
}

/* lip_undivert gives a diverted QP's posts back to the hot path: layer 2
 * switched it back to its default QP, which holds exactly sends and recvs
 * (the WRs the application has not seen complete, in posting order;
 * either chain may be NULL). The rings are reloaded with them as their
 * posts would have recorded them (an inline WR's payload read from its
 * SGEs now), the handshake counters set, then the flag cleared. The
 * diverted CQs, armed and the express lane are not touched: layer 2
 * releases the CQs later (lip_release_cq), and a QP on the lane is never
 * given back. Posts already on their way to layer 2 come back as
 * LIP_HOME (hotpath.c). Returns 0, or -1 with errno (EINVAL: not
 * diverted; EBUSY: on the express lane; ENOSPC: more WRs than a ring
 * holds) and nothing changed. */
int lip_undivert(struct lip_qp *q, struct ibv_send_wr *sends, struct ibv_recv_wr *recvs,
		 uint64_t notifs_done, uint64_t recvs_done)
{
	pthread_mutex_lock(&dcq_mu); /* against a divert */
	int err = 0;
	if (!__atomic_load_n(&q->diverted, __ATOMIC_ACQUIRE))
		err = EINVAL;
	else if (__atomic_load_n(&q->express, __ATOMIC_ACQUIRE))
		err = EBUSY;
	else if (lip_rings_load(q, sends, recvs))
		err = errno;
	if (err) {
		pthread_mutex_unlock(&dcq_mu);
		errno = err;
		return -1;
	}
	q->notifs_done = notifs_done;
	q->recvs_done = recvs_done;
	/* Publish the rings: a post that enters the hot path after this and
	 * sees the flag clear (read relaxed) reads them as loaded here, the
	 * full barrier membarrier makes every thread pass (or the fence the
	 * hot path makes on entering without it) orders them. */
	lip_quiesce();
	__atomic_store_n(&q->diverted, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&dcq_mu);
	return 0;
}
