/* The shadow rings' locks: a spin lock biased to the one thread that
 * uses it. Most programs post to a QP and poll a CQ from one thread (MPI
 * below MPI_THREAD_MULTIPLE, one NCCL proxy thread per QP); they should
 * not pay an atomic instruction per call for the few that use several.
 *
 * A lock starts unowned. The first thread that takes it becomes its
 * owner (one compare-and-swap, once) and from then on takes it with two
 * plain stores and a load: it marks itself busy, then checks that it is
 * still the owner. A second thread that wants the lock revokes the bias
 * for good: under the spin lock it marks the lock shared, makes every
 * thread of the process pass a full barrier (membarrier(2), as a divert
 * does), and waits until the owner is not busy. Either the owner saw
 * "shared" before entering, or the revoker sees it busy and waits: the
 * owner's store and load need only a compiler barrier. From then on
 * everyone, the old owner included, takes the spin lock. Without
 * membarrier (lip_fence) no lock gets an owner: plain spin lock. */
#ifndef LIP_QLOCK_H
#define LIP_QLOCK_H

struct lip_thr;

struct lip_blk {
	struct lip_thr *owner; /* NULL, the thread it is biased to, or LIP_BLK_SHARED */
	int busy;              /* the owner holds it */
	int lock;              /* the spin lock, once shared */
	int held;              /* how its holder took it (LIP_BLK_*): read back by the unlock */
};

#define LIP_BLK_SHARED ((struct lip_thr *)1)
#define LIP_BLK_OWNER 1 /* taken by the owner */
#define LIP_BLK_SPIN 2  /* taken through the spin lock */

extern __thread struct lip_thr *lip_me __attribute__((tls_model("initial-exec")));
extern int lip_fence;
struct lip_thr *lip_thr_register(void);
void lip_blk_claim(struct lip_blk *b, struct lip_thr *me);

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static inline void lip_spin_lock(int *l)
{
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(l, __ATOMIC_RELAXED))
			cpu_relax();
}

/* lip_blk_lock takes b for the calling thread; skip: the program
 * promised one thread at a time (IBPATH_SINGLE_POSTER / _POLLER), and
 * b is left alone (lip_blk_unlock is given the same skip). */
static inline void lip_blk_lock(struct lip_blk *b, int skip)
{
	if (skip)
		return;
	struct lip_thr *me = lip_me;
	if (__builtin_expect(!me, 0))
		me = lip_thr_register();
	for (;;) {
		struct lip_thr *o = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
		if (__builtin_expect(o == me, 1)) {
			__atomic_store_n(&b->busy, 1, __ATOMIC_RELAXED);
			__atomic_signal_fence(__ATOMIC_SEQ_CST);
			if (__builtin_expect(__atomic_load_n(&b->owner, __ATOMIC_RELAXED) == me, 1)) {
				b->held = LIP_BLK_OWNER;
				return;
			}
			__atomic_store_n(&b->busy, 0, __ATOMIC_RELEASE); /* revoked meanwhile */
			continue;
		}
		if (o == LIP_BLK_SHARED) {
			lip_spin_lock(&b->lock);
			b->held = LIP_BLK_SPIN;
			return;
		}
		lip_blk_claim(b, me);
	}
}

static inline void lip_blk_unlock(struct lip_blk *b, int skip)
{
	if (skip)
		return;
	if (b->held == LIP_BLK_OWNER)
		__atomic_store_n(&b->busy, 0, __ATOMIC_RELEASE);
	else if (b->held == LIP_BLK_SPIN)
		__atomic_store_n(&b->lock, 0, __ATOMIC_RELEASE);
}

#endif
