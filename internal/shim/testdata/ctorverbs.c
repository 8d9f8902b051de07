/* A library whose constructor uses verbs: it runs before the preloaded
 * shim's own constructor (the program's libraries are initialised before
 * a preloaded one they do not depend on), so the shim's first verb comes
 * before the shim was set up. With CTORVERBS_MAIN it is the program
 * instead, linked against the library. */
#include <stdio.h>
#include <infiniband/verbs.h>

#ifdef CTORVERBS_MAIN
int main(void)
{
	puts("main");
	return 0;
}
#else
__attribute__((constructor)) static void ctorverbs(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	struct ibv_cq *cq = c ? ibv_create_cq(c, 16, NULL, NULL, 0) : NULL;
	printf("constructor: %d devices, open %s, cq %s\n", n, c ? "ok" : "failed", cq ? "ok" : "failed");
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (c)
		ibv_close_device(c);
	if (list)
		ibv_free_device_list(list);
	fflush(stdout);
}
#endif
