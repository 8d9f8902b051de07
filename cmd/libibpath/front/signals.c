/* Signal handlers the program installs once the core is loaded.
 *
 * The core is Go. A thread running Go code is on a goroutine stack of a
 * few KiB that the Go runtime grows by its own checks; a handler that
 * runs there without SA_ONSTACK (the kernel's signal frame, then the
 * handler's frames) writes past the stack's end into the Go heap. Go says
 * so for every program that loads Go code: a handler installed by non-Go
 * code must use SA_ONSTACK (os/signal, "Non-Go programs that call Go
 * code"). Its runtime adds the flag to the handlers that exist when it
 * starts; handlers installed later are the front's to mend. Such threads
 * are the core's own, and every program thread while it is inside a verb
 * the core handles; a process-directed signal (SIGALRM, SIGCHLD, ...)
 * lands on either. perftest's duration mode is one: signal(SIGALRM,
 * catch_alarm), whose handler reads /proc/stat with fopen and fgets.
 *
 * So while the core is loaded, the front adds SA_ONSTACK to every handler
 * installed through sigaction, signal, sysv_signal, bsd_signal or sigset.
 * A thread with an alternate signal stack (every Go thread, and a program
 * thread from its first call into Go on) then runs the handler there; on
 * any other thread the flag changes nothing. sigaction's
 * old action reports the flags as the program set them. With the core
 * not loaded (IBPATH_DISABLE=1, or a core that failed to load) every call
 * passes straight through. The real functions are looked up at load, so
 * that a call from a signal handler (sigaction is async-signal-safe) does
 * no lookup.
 *
 * The alternate stack: the Go runtime gives a thread without one its own
 * signal stack when the thread first calls into Go, 32 KiB of Go memory,
 * and the thread keeps it (and its Go M) for good. With SA_ONSTACK every
 * handler on that thread runs there, and one needing more would overrun
 * it into the Go heap, where it used to have the thread's own stack
 * between verbs. So before loading the core the front gives the thread
 * that loads it (the main thread, where process-directed signals go
 * first) an alternate stack of 256 KiB with a guard page below, on which
 * an overrun faults; Go takes a cgo thread's existing alternate stack as
 * its signal stack there. Other program threads get Go's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include "front.h"

#define LIPF_EXPORT __attribute__((visibility("default")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t (*signal_fn)(int, sighandler_t);

/* the real functions, and whether the front mends handlers (the core is
 * loaded) */
static void *_Atomic real_sigaction_fn;
static void *_Atomic real_signal_fn, *_Atomic real_sysv_fn, *_Atomic real_bsd_fn, *_Atomic real_sigset_fn;
static atomic_int mending;
/* added[sig]: the front added SA_ONSTACK to sig's current handler */
static atomic_uchar added[NSIG];

/* resolve: the definition after the front of name, found once into slot */
static void *resolve(void *_Atomic *slot, const char *name)
{
	void *f = atomic_load_explicit(slot, memory_order_acquire);
	if (!f) {
		f = lipf_next(name, NULL);
		atomic_store_explicit(slot, f, memory_order_release);
	}
	return f;
}

static sigaction_fn real_sigaction(void)
{
	return (sigaction_fn)resolve(&real_sigaction_fn, "sigaction");
}

static signal_fn real_signal(void *_Atomic *slot, const char *name)
{
	return (signal_fn)resolve(slot, name);
}

void lipf_signals_init(int core_loaded)
{
	real_sigaction();
	real_signal(&real_signal_fn, "signal");
	real_signal(&real_sysv_fn, "sysv_signal");
	real_signal(&real_bsd_fn, "bsd_signal");
	real_signal(&real_sigset_fn, "sigset");
	atomic_store_explicit(&mending, core_loaded, memory_order_release);
}

/* ALTSTACK is the size of the alternate signal stack lipf_signals_altstack
 * gives the thread that loads the core (at least four of the system's
 * SIGSTKSZ). */
#define ALTSTACK (256 * 1024)

void lipf_signals_altstack(void)
{
	stack_t cur;
	if (sigaltstack(NULL, &cur) || !(cur.ss_flags & SS_DISABLE))
		return; /* the thread has one of its own */
	long page = sysconf(_SC_PAGESIZE), min = sysconf(_SC_SIGSTKSZ);
	size_t size = ALTSTACK;
	if (page <= 0)
		page = 4096;
	if (min > 0 && (size_t)min * 4 > size)
		size = ((size_t)min * 4 + (size_t)page - 1) / (size_t)page * (size_t)page;
	char *m = mmap(NULL, size + (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (m == MAP_FAILED)
		return; /* the Go runtime gives the thread its own */
	stack_t ss = {.ss_sp = m + page, .ss_size = size, .ss_flags = 0};
	if (mprotect(m, (size_t)page, PROT_NONE) || sigaltstack(&ss, NULL))
		munmap(m, size + (size_t)page);
}

static int mends(int sig)
{
	return sig > 0 && sig < NSIG && atomic_load_explicit(&mending, memory_order_acquire);
}

static int is_function(sighandler_t h)
{
	return h != SIG_DFL && h != SIG_IGN && h != SIG_ERR
#ifdef SIG_HOLD
	       && h != SIG_HOLD
#endif
		;
}

LIPF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	sigaction_fn real = real_sigaction();
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (!mends(sig))
		return real(sig, act, old);
	struct sigaction mended;
	int add = 0;
	if (act && is_function(act->sa_handler) && !(act->sa_flags & SA_ONSTACK)) {
		mended = *act;
		mended.sa_flags |= SA_ONSTACK;
		act = &mended;
		add = 1;
	}
	int was = atomic_load(&added[sig]);
	int r = real(sig, act, old);
	if (r == 0) {
		if (old && was)
			old->sa_flags &= ~SA_ONSTACK;
		if (act)
			atomic_store(&added[sig], add);
	}
	return r;
}

/* after a signal-style call installed h for sig: the same handler, with
 * SA_ONSTACK added */
static void mend_installed(int sig, sighandler_t h)
{
	sigaction_fn real = real_sigaction();
	struct sigaction cur;
	if (!real || real(sig, NULL, &cur))
		return;
	if (!is_function(h) || cur.sa_handler != h || (cur.sa_flags & SA_ONSTACK)) {
		atomic_store(&added[sig], 0);
		return;
	}
	cur.sa_flags |= SA_ONSTACK;
	if (real(sig, &cur, NULL) == 0)
		atomic_store(&added[sig], 1);
}

static sighandler_t via(void *_Atomic *slot, const char *name, int sig, sighandler_t h)
{
	signal_fn real = real_signal(slot, name);
	if (!real) {
		errno = ENOSYS;
		return SIG_ERR;
	}
	sighandler_t prev = real(sig, h);
#ifdef SIG_HOLD
	if (h == SIG_HOLD) /* sigset's hold: the handler stays as it was */
		return prev;
#endif
	if (prev != SIG_ERR && mends(sig))
		mend_installed(sig, h);
	return prev;
}

LIPF_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	return via(&real_signal_fn, "signal", sig, h);
}

LIPF_EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
	return via(&real_sysv_fn, "sysv_signal", sig, h);
}

LIPF_EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
	return via(&real_bsd_fn, "bsd_signal", sig, h);
}

LIPF_EXPORT sighandler_t sigset(int sig, sighandler_t h)
{
	return via(&real_sigset_fn, "sigset", sig, h);
}
