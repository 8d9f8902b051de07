/* The interposed control verbs. Each forwards to the libibverbs
 * definition of the same symbol version (lip_next, frontlink.c), then
 * tells the Go side what happened. The application sees exactly what
 * libibverbs returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "shim.h"
#include "asyncev.h"
#include "cm.h"
#include "_cgo_export.h"

int lip_enabled = 1;
int lip_record = 1;
int lip_single_poster = 0;
int lip_single_poller = 0;

/* Diverted QPs and CQs go to layer 2 in Go (diverted.go). */
struct lip_hooks lip_hooks = {ibpathPostSend, ibpathPostRecv, ibpathPollCQ, ibpathIntercept, ibpathExpressSurfaced,
			       ibpathPostSRQRecv};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* The executable range of libibpath itself: a verb called from there (the
 * shim's Go side through verbs/ibv, or its C helpers) is the shim's own
 * work and goes straight to libibverbs. */
static uintptr_t self_lo, self_hi;

static int find_self(struct dl_phdr_info *info, size_t size, void *base)
{
	if ((void *)info->dlpi_addr != base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
		if (!self_lo || lo < self_lo)
			self_lo = lo;
		if (hi > self_hi)
			self_hi = hi;
	}
	return 1;
}

static void locate_self(void)
{
	Dl_info di;
	if (dladdr((void *)locate_self, &di) && di.dli_fbase)
		dl_iterate_phdr(find_self, di.dli_fbase);
}

static inline int from_self(void *ra)
{
	return (uintptr_t)ra >= self_lo && (uintptr_t)ra < self_hi;
}

static void do_init(void)
{
	locate_self();
	/* The Go side reads the environment, prints what is active and
	 * sets lip_enabled and lip_record. Called at the first interposed
	 * verb, when every constructor (Go's runtime start among them) has
	 * run, so the flags are settled before any context is swapped. */
	ibpathInit();
}

/* fork(2) without exec: the child has the forking thread alone, and none
 * of the Go runtime's threads. Go does not run in such a process (a
 * garbage collection there waits for threads that are gone, a lock a
 * lost thread held stays held), so the shim passes every verb of the
 * child straight through and never calls its Go side there: the child
 * runs as plain verbs, unprotected. That holds for what it inherited
 * too: a destroy, a dereg or a close of the parent's objects goes to the
 * provider, and the parent's contexts keep the shim's post and poll
 * functions, which pass to the provider once nothing is recorded. A
 * child that execs loads the shim anew (LD_PRELOAD is inherited). */
int lip_child;

#ifdef LIP_FAULTINJECT
void lip_child_entered(const char *where)
{
	dprintf(2, "libibpath: %s entered in pid %d, a child forked without exec\n", where, (int)getpid());
	_exit(97);
}
#endif

static void lip_forked(void)
{
	lip_child = 1;
	lip_enabled = 0;
	lip_record = 0;
	lip_cq_headroom = 0;
}

__attribute__((constructor)) static void lip_atfork(void)
{
	if (pthread_atfork(NULL, NULL, lip_forked))
		fprintf(stderr, "libibpath: pthread_atfork failed: a child forked without exec may hang in the shim\n");
}

/* lip_debug_state writes what the shim's QPs (their rings), completion
 * channels and express lane hold to stderr: for a debugger attached to a program that waits
 * for ever (gdb -p PID -batch -ex 'call (void)lip_debug_state()'; the
 * lab's stuck dump does). Takes no lock (a stopped thread may hold one),
 * so what it reads may be a moment apart. */
__attribute__((used, noinline)) void lip_debug_state(void)
{
	dprintf(2, "libibpath state of pid %d: enabled %d record %d channels %d child %d\n", (int)getpid(), lip_enabled,
		lip_record, lip_channels, lip_child);
	lip_qp_dump(2);
	lip_chan_dump(2);
	lip_xl_dump(2);
}

static inline void lip_init(void)
{
	if (lip_child)
		return; /* no Go side here, initialised or not */
	pthread_once(&init_once, do_init);
}

static void *real(const char *name, const char *version)
{
	void *f = lip_next(name, version);
	if (!f)
		fprintf(stderr, "libibpath: %s@%s not found in the next library (is libibverbs loaded?): %s; the call fails "
		        "with ENOSYS\n", name, version, dlerror());
	return f;
}

/* lip_inside is set while a thread runs the shim's own work for an
 * interposed call: a verb the shim's Go side calls then (Go links c-shared
 * libraries with -Bsymbolic, so such calls bind to these interposers)
 * goes straight to libibverbs. */
static __thread int lip_inside;

/* REAL_V: real_<name>, the next library's definition, looked up once;
 * without one the interposed call fails (fail, errno ENOSYS) instead of
 * taking the program down. */
#define REAL_V(name, version, ret, args, fail) \
	lip_init(); \
	static ret(*real_##name) args; \
	if (!real_##name) \
		real_##name = (ret(*) args)real(#name, version); \
	if (!real_##name) { \
		errno = ENOSYS; \
		return fail; \
	}

#define REAL(name, ret, args, fail) REAL_V(name, "IBVERBS_1.1", ret, args, fail)

#define PASS_IF_INSIDE(call) \
	do { \
		if (lip_inside || !lip_enabled || from_self(__builtin_return_address(0))) \
			return call; \
	} while (0)

#define ENTER() (lip_inside = 1)
#define LEAVE() (lip_inside = 0)

static struct ibv_qp *lip_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
static struct ibv_cq_ex *lip_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);

/* lip_ctxs_open: device contexts open through ibv_open_device here, the
 * shim's own among them; the watch in unseen.go compares it with the
 * process's uverbs fds, to say when the program opened a device behind
 * the shim's back */
atomic_long lip_ctxs_open;

struct ibv_context *lip_open_device(struct ibv_device *dev) __asm__("ibv_open_device");
struct ibv_context *lip_open_device(struct ibv_device *dev)
{
	REAL(ibv_open_device, struct ibv_context *, (struct ibv_device *), NULL);
	int pass = lip_inside || !lip_enabled || from_self(__builtin_return_address(0));
	struct ibv_context *ctx = real_ibv_open_device(dev);
	if (ctx)
		atomic_fetch_add(&lip_ctxs_open, 1);
	if (pass || !ctx)
		return ctx;
	struct lip_ctx *c = lip_ctx_add(ctx);
	if (!c) {
		fprintf(stderr, "libibpath: %s: too many open contexts; this one is not protected\n", ibv_get_device_name(dev));
		return ctx;
	}
	/* ibv_create_qp_ex is inline in verbs.h and calls the context's
	 * create_qp_ex (librdmacm's rdma_create_qp among its users): the
	 * shim takes that slot too. */
	struct verbs_context *v = verbs_get_ctx(ctx);
	if (v && verbs_get_ctx_op(ctx, create_qp_ex)) {
		c->create_qp_ex = v->create_qp_ex;
		v->create_qp_ex = lip_create_qp_ex;
	}
	/* ibv_create_cq_ex is inline too: its channel must be the real one,
	 * its size gets the headroom, and its ibv_start_poll is followed
	 * (cqex.c) */
	if (v && (lip_channels || lip_cq_headroom > 0 || lip_record) && verbs_get_ctx_op(ctx, create_cq_ex)) {
		c->create_cq_ex = v->create_cq_ex;
		v->create_cq_ex = lip_create_cq_ex;
	}
	ENTER();
	ibpathOpened(ctx, (char *)ibv_get_device_name(dev));
	LEAVE();
	return ctx;
}

int lip_close_device(struct ibv_context *ctx) __asm__("ibv_close_device");
int lip_close_device(struct ibv_context *ctx)
{
	REAL(ibv_close_device, int, (struct ibv_context *), -1);
	if (lip_inside || !lip_enabled || from_self(__builtin_return_address(0))) {
		int ret = real_ibv_close_device(ctx);
		if (ret == 0)
			atomic_fetch_sub(&lip_ctxs_open, 1);
		return ret;
	}
	if (lip_ctx_of(ctx)) {
		ENTER();
		ibpathClosed(ctx);
		LEAVE();
		lip_ctx_remove(ctx);
	}
	lip_async_close(ctx);
	int ret = real_ibv_close_device(ctx);
	if (ret == 0)
		atomic_fetch_sub(&lip_ctxs_open, 1);
	return ret;
}

/* reg_mr: the shim mirrors every registration on the backup device (layer
 * 2's shadow resources). ibv_reg_mr@1.1 is what verbs.h's inline
 * __ibv_reg_mr calls for constant access flags; ibv_reg_mr_iova2@1.8 the
 * rest. */
static void mr_registered(struct ibv_mr *mr, void *addr, size_t len, int access)
{
	if (!mr || !lip_ctx_of(mr->context))
		return;
	ENTER();
	ibpathMR(mr, addr, len, access);
	LEAVE();
}

struct ibv_mr *lip_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) __asm__("ibv_reg_mr");
struct ibv_mr *lip_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	REAL(ibv_reg_mr, struct ibv_mr *, (struct ibv_pd *, void *, size_t, int), NULL);
	PASS_IF_INSIDE(real_ibv_reg_mr(pd, addr, len, access));
	struct ibv_mr *mr = real_ibv_reg_mr(pd, addr, len, access);
	mr_registered(mr, addr, len, access);
	return mr;
}

struct ibv_mr *lip_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access) __asm__("ibv_reg_mr_iova2");
struct ibv_mr *lip_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
	static struct ibv_mr *(*real_ibv_reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
	lip_init();
	if (!real_ibv_reg_mr_iova2) {
		real_ibv_reg_mr_iova2 = lip_next("ibv_reg_mr_iova2", "IBVERBS_1.8");
		if (!real_ibv_reg_mr_iova2) {
			/* a libibverbs older than the program's call: it fails as
			 * that libibverbs would have it fail to link, not the process */
			fprintf(stderr, "libibpath: ibv_reg_mr_iova2@IBVERBS_1.8 not found: %s\n", dlerror());
			errno = EOPNOTSUPP;
			return NULL;
		}
	}
	PASS_IF_INSIDE(real_ibv_reg_mr_iova2(pd, addr, len, iova, access));
	struct ibv_mr *mr = real_ibv_reg_mr_iova2(pd, addr, len, iova, access);
	if (iova == (uintptr_t)addr)
		mr_registered(mr, addr, len, (int)access);
	return mr;
}

/* ibv_reg_dmabuf_mr@1.12 (GPU memory: NCCL's GPUDirect RDMA through
 * dma-buf): mirrored by the same fd, before the application can close it.
 * A libibverbs without it (before rdma-core 34) fails the call as that
 * library would have: the program could not have bound to it there. */
struct ibv_mr *lip_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) __asm__("ibv_reg_dmabuf_mr");
struct ibv_mr *lip_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access)
{
	lip_init();
	static struct ibv_mr *(*real_reg_dmabuf)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
	if (!real_reg_dmabuf)
		real_reg_dmabuf = (struct ibv_mr *(*)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int))
			lip_next("ibv_reg_dmabuf_mr", "IBVERBS_1.12");
	if (!real_reg_dmabuf) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	PASS_IF_INSIDE(real_reg_dmabuf(pd, offset, len, iova, fd, access));
	struct ibv_mr *mr = real_reg_dmabuf(pd, offset, len, iova, fd, access);
	if (mr && lip_ctx_of(mr->context)) {
		ENTER();
		ibpathDmabufMR(mr, offset, len, iova, fd, access);
		LEAVE();
	}
	return mr;
}

/* ibv_rereg_mr@1.1: the region's mirror follows what the call left of
 * it (Runtime.ReregMR): replaced, kept, or released. */
int lip_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access) __asm__("ibv_rereg_mr");
int lip_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access)
{
	REAL(ibv_rereg_mr, int, (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int), IBV_REREG_MR_ERR_INPUT);
	PASS_IF_INSIDE(real_ibv_rereg_mr(mr, flags, pd, addr, len, access));
	uint32_t old_lkey = mr ? mr->lkey : 0;
	int ret = real_ibv_rereg_mr(mr, flags, pd, addr, len, access);
	if (mr && lip_ctx_of(mr->context)) {
		int e = errno;
		ENTER();
		ibpathReregMR(mr, old_lkey, ret, flags, access);
		LEAVE();
		errno = e;
	}
	return ret;
}

int lip_dereg_mr(struct ibv_mr *mr) __asm__("ibv_dereg_mr");
int lip_dereg_mr(struct ibv_mr *mr)
{
	REAL(ibv_dereg_mr, int, (struct ibv_mr *), ENOSYS);
	PASS_IF_INSIDE(real_ibv_dereg_mr(mr));
	if (lip_ctx_of(mr->context)) {
		ENTER();
		ibpathDeregMR(mr);
		LEAVE();
	}
	return real_ibv_dereg_mr(mr);
}

/* padded_create is a QP's creation with the send slot of layer 1's nudge
 * (nudge.c) when *pad: the provider is asked for one send WR more, and
 * the application is told what the provider gave less that one (at least
 * what it asked for). A provider that refuses the larger queue is asked
 * again for the application's own, and *pad is cleared. create and
 * create_again are the same call, made with attr as it stands. */
#define padded_create(attr, pad, create, create_again)                              \
	({                                                                          \
		struct ibv_qp *qp_;                                                 \
		struct ibv_qp_cap cap_ = (attr)->cap;                               \
		if (*(pad))                                                         \
			(attr)->cap.max_send_wr++;                                  \
		qp_ = (create);                                                     \
		if (!qp_ && *(pad)) {                                               \
			*(pad) = 0;                                                 \
			(attr)->cap = cap_;                                         \
			qp_ = (create_again);                                       \
		} else if (*(pad)) {                                                \
			if (qp_ && (attr)->cap.max_send_wr > cap_.max_send_wr)      \
				(attr)->cap.max_send_wr--;                          \
			else if (qp_)                                               \
				(attr)->cap.max_send_wr = cap_.max_send_wr;         \
		}                                                                   \
		qp_;                                                                \
	})

/* not_tracked says why a QP the runtime would protect got no shadow
 * rings (lip_qp_add's errno): no memory for them, or the shim's tables
 * are full (LIP_QP_SLOTS a context, LIP_PTR_SLOTS a process). */
static void not_tracked(struct ibv_qp *qp)
{
	if (errno == ENOSPC)
		fprintf(stderr, "libibpath: QP %#x: the shim's QP tables are full (%d QPs a device context, %d a process); "
		        "it is not protected\n", qp->qp_num, LIP_QP_SLOTS, LIP_PTR_SLOTS);
	else
		fprintf(stderr, "libibpath: QP %#x: no memory for its shadow rings; it is not protected\n", qp->qp_num);
}

int lip_destroy_qp(struct ibv_qp *qp) __asm__("ibv_destroy_qp");
struct ibv_qp *lip_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) __asm__("ibv_create_qp");
struct ibv_qp *lip_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	REAL(ibv_create_qp, struct ibv_qp *, (struct ibv_pd *, struct ibv_qp_init_attr *), NULL);
	PASS_IF_INSIDE(real_ibv_create_qp(pd, attr));
	int pad = lip_enabled && lip_nudge_pad(lip_ctx_of(pd->context), attr);
	for (;;) {
		struct ibv_qp *qp = padded_create(attr, &pad, real_ibv_create_qp(pd, attr), real_ibv_create_qp(pd, attr));
		if (!qp || !lip_ctx_of(qp->context))
			return qp;
		ENTER();
		int protect = ibpathCreated(qp, attr);
		LEAVE();
		struct lip_qp *q = protect ? lip_qp_add(qp, attr) : NULL;
		if (q) {
			lip_nudge_created(q, pad);
			return qp;
		}
		if (protect)
			not_tracked(qp);
		if (!pad)
			return qp;
		/* untracked, yet made with the nudge's slot, which
		 * ibv_query_qp would show: made again without it */
		lip_destroy_qp(qp);
		pad = 0;
	}
}

/* qp_ex_of is ibv_qp_to_qp_ex (IBVERBS_1.6), looked up rather than
 * linked: a libibverbs without it leaves such QPs unprotected. */
static struct ibv_qp_ex *qp_ex_of(struct ibv_qp *qp)
{
	static struct ibv_qp_ex *(*to_ex)(struct ibv_qp *);
	static int looked;
	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		to_ex = (struct ibv_qp_ex * (*)(struct ibv_qp *)) lip_next("ibv_qp_to_qp_ex", "IBVERBS_1.6");
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	return to_ex ? to_ex(qp) : NULL;
}

/* lip_create_qp_ex stands in for the provider's create_qp_ex. A QP that
 * posts through the ibv_wr_* API (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) gets
 * the shim's ibv_wr_* functions (wrapi.c) when it asks only for the
 * operations they follow; otherwise it is seen but not protected. */
static struct ibv_qp *lip_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
	struct lip_ctx *c = lip_ctx_of(context);
	if (!c || !c->create_qp_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_qp_init_attr a = {.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
		.srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all};
	int wr_api = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
	/* a QP asking for ibv_wr_* operations the shim does not follow is
	 * not protected, so layer 1 cannot nudge it: no slot */
	int follows = wr_api && lip_record && lip_wr_follows(attr->send_ops_flags);
	int pad = (!wr_api || follows) && !lip_inside && lip_enabled && lip_nudge_pad(c, &a);
	for (;;) {
		struct ibv_qp *qp = padded_create(attr, &pad, c->create_qp_ex(context, attr), c->create_qp_ex(context, attr));
		if (!qp || lip_inside || !lip_enabled)
			return qp;
		a.cap = attr->cap;
		struct ibv_qp_ex *qpx = NULL;
		if (follows)
			qpx = qp_ex_of(qp);
		int follow = qpx != NULL;
		ENTER();
		int protect = ibpathCreatedEx(qp, &a, wr_api && lip_record && !follow);
		LEAVE();
		struct lip_qp *q = protect ? lip_qp_add(qp, &a) : NULL;
		if (q && follow && lip_wr_attach(q, qpx, &attr->cap)) {
			perror("libibpath: take over the ibv_wr_* functions of a QP (it is not protected)");
			lip_qp_free(lip_qp_remove(qp));
			q = NULL;
		} else if (!q && protect) {
			not_tracked(qp);
		}
		if (q) {
			lip_nudge_created(q, pad);
			return qp;
		}
		if (!pad)
			return qp;
		/* untracked, yet made with the nudge's slot, which
		 * ibv_query_qp would show: made again without it */
		lip_destroy_qp(qp);
		pad = 0;
	}
}

int lip_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) __asm__("ibv_modify_qp");
int lip_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	REAL(ibv_modify_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int), ENOSYS);
	PASS_IF_INSIDE(real_ibv_modify_qp(qp, attr, mask));
	ENTER();
	/* Layer 1 carries out the modifies of InfiniBand RC QPs (adding its
	 * alternate path to the application's own INIT->RTR and RTR->RTS, and
	 * retrying without it if the device refuses); it never changes the
	 * application's attributes. Every other modify goes straight on. */
	int ret;
	if (ibpathLayer1Wants(qp, attr, mask))
		ret = ibpathModify(qp, attr, mask);
	else
		ret = real_ibv_modify_qp(qp, attr, mask);
	/* layer 1 failed (a panic the Go side recovered): the modify as the
	 * application wrote it; if layer 1 had made it already, the provider
	 * answers the second one as it would a repeated modify */
	if (ret == LIP_GUARDED)
		ret = real_ibv_modify_qp(qp, attr, mask);
	ibpathAfterModify(qp, attr, mask, ret);
	LEAVE();
	return ret;
}

/* lip_query_qp: a QP created with the send slot of layer 1's nudge
 * (nudge.c) reports to the program the send queue it was told of at
 * creation, without the slot. */
int lip_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init) __asm__("ibv_query_qp");
int lip_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	REAL(ibv_query_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *), ENOSYS);
	PASS_IF_INSIDE(real_ibv_query_qp(qp, attr, mask, init));
	int ret = real_ibv_query_qp(qp, attr, mask, init);
	struct lip_qp *q = ret == 0 && lip_record ? lip_qp_of(qp) : NULL;
	if (q && q->nudge_slot) {
		if (init && init->cap.max_send_wr > 0)
			init->cap.max_send_wr--;
		if (attr && (mask & IBV_QP_CAP) && attr->cap.max_send_wr > 0)
			attr->cap.max_send_wr--;
	}
	return ret;
}

/* ibv_create_srq: an SRQ layer 2 mirrors on the backup device gets a
 * shadow ring of its receives (srq.c); its QPs are then protected. The
 * ring exists before the Go side hears of the SRQ, so that no receive
 * posted to it goes unrecorded; one the Go side did not mirror is
 * dropped. (ibv_create_srq_ex, inline in verbs.h, is not followed: its
 * SRQs' QPs pass through, the reason in their status.) */
struct ibv_srq *lip_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr) __asm__("ibv_create_srq");
struct ibv_srq *lip_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	REAL(ibv_create_srq, struct ibv_srq *, (struct ibv_pd *, struct ibv_srq_init_attr *), NULL);
	PASS_IF_INSIDE(real_ibv_create_srq(pd, attr));
	struct ibv_srq *srq = real_ibv_create_srq(pd, attr);
	if (!srq || !lip_record || !lip_ctx_of(srq->context))
		return srq;
	int err = errno;
	if (!lip_srq_add(srq, attr->attr.max_wr)) {
		fprintf(stderr, "libibpath: an SRQ cannot be followed (%s); its QPs are not protected\n",
			errno == ENOSPC ? "the shim's SRQ table is full" :
			errno == EINVAL ? "its device has no post_srq_recv the shim took over" : "no memory for its shadow ring");
		errno = err;
		return srq;
	}
	ENTER();
	int follow = ibpathSRQCreated(srq);
	LEAVE();
	if (!follow)
		lip_srq_remove(srq);
	errno = err;
	return srq;
}

int lip_destroy_srq(struct ibv_srq *srq) __asm__("ibv_destroy_srq");
int lip_destroy_srq(struct ibv_srq *srq)
{
	REAL(ibv_destroy_srq, int, (struct ibv_srq *), ENOSYS);
	PASS_IF_INSIDE(real_ibv_destroy_srq(srq));
	struct ibv_context *ctx = srq->context;
	int ret = real_ibv_destroy_srq(srq);
	if (ret == 0 && lip_srq_of(srq)) {
		ENTER();
		ibpathSRQDestroyed(ctx, srq);
		LEAVE();
		lip_srq_remove(srq);
	}
	return ret;
}

int lip_destroy_qp(struct ibv_qp *qp) __asm__("ibv_destroy_qp");
int lip_destroy_qp(struct ibv_qp *qp)
{
	REAL(ibv_destroy_qp, int, (struct ibv_qp *), ENOSYS);
	PASS_IF_INSIDE(real_ibv_destroy_qp(qp));
	struct ibv_context *ctx = qp->context;
	uint32_t qpn = qp->qp_num;
	int known = lip_ctx_of(ctx) != NULL;
	lip_async_forget_qp(qp); /* an event given back of it never comes now */
	if (known) {
		/* layer 2 stops touching the QP, which may be freed under it */
		ENTER();
		ibpathDestroying(ctx, qpn);
		LEAVE();
	}
	struct lip_qp *gone = lip_qp_remove(qp);
	if (gone)
		lip_qp_destroying(gone, 1);
	int ret = real_ibv_destroy_qp(qp);
	if (gone)
		lip_qp_destroying(gone, 0);
	if (ret == 0) {
		ENTER();
		ibpathDestroyed(ctx, qpn, qp);
		LEAVE();
		if (gone)
			lip_qp_free(gone);
		return ret;
	}
	/* refused: the QP stays the application's, protected as it was */
	int err = errno;
	int kept = !gone || lip_qp_restore(gone) == 0;
	if (!kept)
		lip_qp_free(gone);
	if (known) {
		ENTER();
		ibpathDestroyFailed(ctx, qpn, ret, kept);
		LEAVE();
	}
	errno = err;
	return ret;
}

/* ibv_get_async_event through the filter of asyncev.c: every event goes
 * to the Go side, which records it and keeps from the application a fatal
 * event of what layer 2 carries on its backup. */
static int (*real_get_async)(struct ibv_context *, struct ibv_async_event *);
static void (*real_ack_async)(struct ibv_async_event *);

static int async_get(struct ibv_context *ctx, struct ibv_async_event *ev) { return real_get_async(ctx, ev); }
static void async_ack(struct ibv_async_event *ev) { real_ack_async(ev); }

static int async_keep(struct ibv_context *ctx, const struct ibv_async_event *ev)
{
	if (!lip_ctx_of(ctx))
		return 0;
	uint32_t qpn = 0;
	int port = 0;
	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		qpn = ev->element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		port = ev->element.port_num;
		break;
	default:
		break;
	}
	ENTER();
	int keep = ibpathAsyncEvent(ctx, ev->event_type, qpn, port);
	LEAVE();
	return keep && lip_async_keepable(ev->event_type);
}

static const struct lip_async_ops async_ops = {async_get, async_ack, async_keep};

int lip_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) __asm__("ibv_get_async_event");
int lip_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	REAL(ibv_get_async_event, int, (struct ibv_context *, struct ibv_async_event *), -1);
	PASS_IF_INSIDE(real_ibv_get_async_event(ctx, ev));
	if (!real_ack_async)
		real_ack_async = (void (*)(struct ibv_async_event *))real("ibv_ack_async_event", "IBVERBS_1.1");
	if (!real_ack_async)
		return real_ibv_get_async_event(ctx, ev); /* nothing can be kept without it */
	real_get_async = real_ibv_get_async_event;
	return lip_async_filter(ctx, ev, &async_ops);
}

/* ibv_ack_async_event: the acknowledgement of an event the shim gave back
 * (asyncev.h) stops here; libibverbs never returned that event, and would
 * count the acknowledgement against the QP (ibv_destroy_qp then waits for
 * ever). Every other one goes to libibverbs. */
void lip_ack_async_event(struct ibv_async_event *ev) __asm__("ibv_ack_async_event");
void lip_ack_async_event(struct ibv_async_event *ev)
{
	static void (*real_ack)(struct ibv_async_event *);
	if (lip_async_acked(ev))
		return;
	if (!real_ack)
		real_ack = (void (*)(struct ibv_async_event *))real("ibv_ack_async_event", "IBVERBS_1.1");
	if (real_ack)
		real_ack(ev);
}

/* rdma_get_cm_event (librdmacm's, RDMACM_1.0): an UNREACHABLE that the
 * kernel reports on a connected id whose QP a layer of ibpath carries
 * does not reach the application (cm.c); every other event does, as
 * librdmacm returned it. Interposed only when librdmacm is loaded: the
 * application's reference binds here, and librdmacm's own definition
 * does the work. */
static int cm_protects(struct ibv_qp *qp, int status)
{
	if (!lip_ctx_of(qp->context))
		return 0;
	ENTER();
	int hide = ibpathCMUnreachable(qp, status);
	LEAVE();
	return hide;
}

static void cm_established(struct ibv_qp *qp, int up)
{
	if (!lip_ctx_of(qp->context))
		return;
	ENTER();
	ibpathCMEstablished(qp, up);
	LEAVE();
}

int lip_get_cm_event(void *channel, struct lip_cm_event **ev) __asm__("rdma_get_cm_event");
int lip_get_cm_event(void *channel, struct lip_cm_event **ev)
{
	REAL_V(rdma_get_cm_event, "RDMACM_1.0", int, (void *, struct lip_cm_event **), -1);
	REAL_V(rdma_ack_cm_event, "RDMACM_1.0", int, (struct lip_cm_event *), -1);
	if (!lip_enabled || !ev)
		return real_rdma_get_cm_event(channel, ev);
	struct lip_cm_ops ops = {real_rdma_get_cm_event, real_rdma_ack_cm_event, cm_protects, cm_established};
	return lip_cm_next(channel, ev, &ops);
}

/* Completion channels (channel.c): the application gets a channel whose
 * fd the shim can make readable when a backup device completes its work;
 * libibverbs and the kernel keep seeing the real one. */
struct ibv_comp_channel *lip_create_comp_channel(struct ibv_context *ctx) __asm__("ibv_create_comp_channel");
struct ibv_comp_channel *lip_create_comp_channel(struct ibv_context *ctx)
{
	REAL_V(ibv_create_comp_channel, "IBVERBS_1.0", struct ibv_comp_channel *, (struct ibv_context *), NULL);
	PASS_IF_INSIDE(real_ibv_create_comp_channel(ctx));
	struct ibv_comp_channel *ch = real_ibv_create_comp_channel(ctx);
	if (!ch || !lip_channels || !lip_ctx_of(ctx))
		return ch;
	struct ibv_comp_channel *w = lip_chan_new(ch);
	if (!w) {
		perror("libibpath: wrap a completion channel (events of backup completions will not reach it)");
		return ch;
	}
	return w;
}

int lip_destroy_comp_channel(struct ibv_comp_channel *ch) __asm__("ibv_destroy_comp_channel");
int lip_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	REAL_V(ibv_destroy_comp_channel, "IBVERBS_1.0", int, (struct ibv_comp_channel *), ENOSYS);
	int ret = lip_chan_destroy(ch, real_ibv_destroy_comp_channel);
	return ret == -1 ? real_ibv_destroy_comp_channel(ch) : ret;
}

int lip_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx) __asm__("ibv_get_cq_event");
int lip_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	REAL(ibv_get_cq_event, int, (struct ibv_comp_channel *, struct ibv_cq **, void **), -1);
	int ret = lip_chan_get_event(ch, cq, cq_ctx, real_ibv_get_cq_event);
	return ret == -2 ? real_ibv_get_cq_event(ch, cq, cq_ctx) : ret;
}

/* CQ headroom: with the switch back on, every CQ of the application is
 * created (and resized) with lip_cq_headroom entries more than it asks
 * for, for the completions of the switch back's own probes and
 * notifications on its QPs; the Go side shares them out (cqroom.go). A
 * device that refuses the larger size gets the application's own, and
 * the Go side hears that the CQ has no headroom. */
int lip_cq_headroom = 0; /* set by the Go side */

/* cq_pad is the headroom to add to an application CQ of cqe entries on
 * ctx (0 for the shim's own CQs, and for a size the provider must refuse
 * as it would without the shim). */
static int cq_pad(struct ibv_context *ctx, int cqe)
{
	if (lip_cq_headroom <= 0 || lip_inside || !lip_ctx_of(ctx) || cqe < 1 || cqe > INT_MAX - lip_cq_headroom)
		return 0;
	return lip_cq_headroom;
}

static void cq_sized(struct ibv_cq *cq, int pad)
{
	if (!cq || lip_cq_headroom <= 0 || lip_inside || !lip_ctx_of(cq->context))
		return;
	ENTER();
	ibpathCQCreated(cq, pad);
	LEAVE();
}

struct ibv_cq *lip_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch, int vec) __asm__("ibv_create_cq");
struct ibv_cq *lip_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch, int vec)
{
	REAL(ibv_create_cq, struct ibv_cq *, (struct ibv_context *, int, void *, struct ibv_comp_channel *, int), NULL);
	struct ibv_comp_channel *real_ch = lip_chan_real(ch);
	int pad = cq_pad(ctx, cqe);
	struct ibv_cq *cq = real_ibv_create_cq(ctx, cqe + pad, cq_ctx, real_ch, vec);
	if (!cq && pad) {
		pad = 0;
		cq = real_ibv_create_cq(ctx, cqe, cq_ctx, real_ch, vec);
	}
	if (cq && real_ch != ch)
		lip_chan_cq_created(cq, ch);
	cq_sized(cq, pad);
	return cq;
}

int lip_resize_cq(struct ibv_cq *cq, int cqe) __asm__("ibv_resize_cq");
int lip_resize_cq(struct ibv_cq *cq, int cqe)
{
	REAL(ibv_resize_cq, int, (struct ibv_cq *, int), ENOSYS);
	int pad = cq_pad(cq->context, cqe);
	int ret = real_ibv_resize_cq(cq, cqe + pad);
	if (ret && pad) {
		pad = 0;
		ret = real_ibv_resize_cq(cq, cqe);
	}
	if (ret == 0)
		cq_sized(cq, pad);
	return ret;
}

static struct ibv_cq_ex *lip_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	struct lip_ctx *c = lip_ctx_of(context);
	if (!c || !c->create_cq_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_comp_channel *ch = attr->channel, *real_ch = lip_chan_real(ch);
	uint32_t cqe = attr->cqe;
	int pad = cqe > INT_MAX ? 0 : cq_pad(context, (int)cqe);
	attr->channel = real_ch;
	attr->cqe = cqe + pad;
	struct ibv_cq_ex *cq = c->create_cq_ex(context, attr);
	if (!cq && pad) {
		pad = 0;
		attr->cqe = cqe;
		cq = c->create_cq_ex(context, attr);
	}
	attr->channel = ch;
	attr->cqe = cqe;
	if (cq && real_ch != ch)
		lip_chan_cq_created(ibv_cq_ex_to_cq(cq), ch);
	if (cq)
		cq_sized(ibv_cq_ex_to_cq(cq), pad);
	if (cq && !lip_inside && lip_enabled && lip_record)
		lip_cqex_follow(cq); /* its ibv_start_poll bypasses the hot path (cqex.c) */
	return cq;
}

/* lip_tell_cq_extended: the program created cq with ibv_create_cq_ex
 * (cqex.c follows it). */
void lip_tell_cq_extended(struct ibv_cq *cq)
{
	if (lip_child)
		return;
	int was = lip_inside;
	ENTER();
	ibpathCQExtended(cq);
	lip_inside = was;
}

/* lip_tell_cq_polled: the program polls cq, an extended CQ, with
 * ibv_poll_cq (its first poll of any kind, cqex.c). */
void lip_tell_cq_polled(struct ibv_cq *cq)
{
	if (lip_child)
		return;
	int was = lip_inside;
	ENTER();
	ibpathCQPolled(cq);
	lip_inside = was;
}

/* lip_tell_start_poll: the program polls cq with ibv_start_poll (cqex.c). */
void lip_tell_start_poll(struct ibv_cq *cq)
{
	if (lip_child)
		return;
	int was = lip_inside;
	ENTER();
	ibpathCQStartPoll(cq);
	lip_inside = was;
}

int lip_destroy_cq(struct ibv_cq *cq) __asm__("ibv_destroy_cq");
int lip_destroy_cq(struct ibv_cq *cq)
{
	REAL(ibv_destroy_cq, int, (struct ibv_cq *), ENOSYS);
	if (lip_child) /* (the channel's count is plain verbs' business: kept) */
		return lip_chan_cq_destroy(cq, real_ibv_destroy_cq);
	struct ibv_context *ctx = cq->context;
	int sized = lip_cq_headroom > 0 && !lip_inside && lip_ctx_of(ctx);
	int ret = lip_chan_cq_destroy(cq, real_ibv_destroy_cq);
	/* forgotten once gone (a CQ that stays keeps being followed); only the
	 * pointer's value is used */
	if (ret == 0 && !lip_inside && lip_cqex_forget(cq)) {
		ENTER();
		ibpathCQStartPollGone(ctx, cq);
		LEAVE();
	}
	if (ret == 0 && sized) {
		/* only the pointer's value is used: the Go side forgets it */
		ENTER();
		ibpathCQDestroyed(ctx, cq);
		LEAVE();
	}
	if (ret == 0 && !lip_inside && lip_ctx_of(ctx)) {
		ENTER();
		ibpathCQGone(ctx, cq);
		LEAVE();
	}
	return ret;
}
