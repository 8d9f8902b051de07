/* A program that loads libibverbs itself, as NCCL before 2.30 does: not
 * linked with it, it opens it with dlopen and resolves every verb with
 * dlvsym at IBVERBS_1.1 on that handle.
 *
 *   dlprobe verbs [FILE]   open FILE (libibverbs.so.1), make an RC QP
 *                          asking for 64 send WRs on the stand-in device,
 *                          print "create TOLD/ASKED": what the program was
 *                          told and what the provider was asked for (the
 *                          shim's nudge slot makes it one more)
 *   dlprobe missing        dlopen of a libibverbs that does not exist:
 *                          print what dlerror says
 *   dlprobe runpath        dlopen("libdlrun.so"), a library found only
 *                          through this program's DT_RUNPATH: print
 *                          "runpath N" with the value of its function */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

#define V "IBVERBS_1.1"

static void *sym(void *h, const char *name, const char *version)
{
	void *f = version ? dlvsym(h, name, version) : dlsym(h, name);
	if (!f)
		fprintf(stderr, "dlprobe: %s: %s\n", name, dlerror());
	return f;
}

static int verbs(const char *file)
{
	void *h = dlopen(file, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlprobe: dlopen %s: %s\n", file, dlerror());
		return 2;
	}
	struct ibv_device **(*get_list)(int *) = sym(h, "ibv_get_device_list", V);
	struct ibv_context *(*open_dev)(struct ibv_device *) = sym(h, "ibv_open_device", V);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *) = sym(h, "ibv_alloc_pd", V);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int) =
		sym(h, "ibv_create_cq", V);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *) = sym(h, "ibv_create_qp", V);
	int (*destroy_qp)(struct ibv_qp *) = sym(h, "ibv_destroy_qp", V);
	int (*destroy_cq)(struct ibv_cq *) = sym(h, "ibv_destroy_cq", V);
	int (*dealloc_pd)(struct ibv_pd *) = sym(h, "ibv_dealloc_pd", V);
	int (*close_dev)(struct ibv_context *) = sym(h, "ibv_close_device", V);
	uint32_t (*asked)(struct ibv_qp *) = sym(h, "fake_qp_asked", NULL);
	if (!get_list || !open_dev || !alloc_pd || !create_cq || !create_qp || !destroy_qp || !destroy_cq || !dealloc_pd ||
	    !close_dev || !asked)
		return 3;
	struct ibv_device **l = get_list(NULL);
	struct ibv_context *ctx = l && l[0] ? open_dev(l[0]) : NULL;
	struct ibv_pd *pd = ctx ? alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? create_cq(ctx, 64, NULL, NULL, 0) : NULL;
	if (!cq) {
		fprintf(stderr, "dlprobe: device, PD or CQ failed\n");
		return 4;
	}
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = create_qp(pd, &ia);
	if (!qp) {
		fprintf(stderr, "dlprobe: ibv_create_qp failed\n");
		return 5;
	}
	printf("create %u/%u\n", ia.cap.max_send_wr, asked(qp));
	if (destroy_qp(qp) || destroy_cq(cq) || dealloc_pd(pd) || close_dev(ctx))
		return 6;
	return dlclose(h) ? 7 : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "verbs";
	if (!strcmp(mode, "verbs"))
		return verbs(argc > 2 ? argv[2] : "libibverbs.so.1");
	if (!strcmp(mode, "missing")) {
		void *h = dlopen("libibverbs.so.9", RTLD_NOW);
		printf("%s\n", h ? "opened" : dlerror());
		return 0;
	}
	if (!strcmp(mode, "runpath")) {
		void *h = dlopen("libdlrun.so", RTLD_NOW);
		if (!h) {
			printf("runpath: %s\n", dlerror());
			return 0;
		}
		int (*f)(void) = sym(h, "dlrun", NULL);
		printf("runpath %d\n", f ? f() : -1);
		return dlclose(h);
	}
	fprintf(stderr, "dlprobe: unknown mode %s\n", mode);
	return 1;
}
