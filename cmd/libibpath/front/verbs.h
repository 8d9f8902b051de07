/* The verbs the front exports, with the symbol version each stands in
 * for and how a call fails when no definition is found: exactly those of
 * ../libibpath.map, the version script both libraries are linked with
 * (TestFrontExports compares the built front with it). Only the core
 * defines what each does; the front jumps to it.
 *
 * V(name, version, failure), failure one of
 *   NULL_ENOSYS      returns NULL, errno ENOSYS
 *   NULL_EOPNOTSUPP  returns NULL, errno EOPNOTSUPP (a registration that
 *                    libibverbs lacks, as the core fails it)
 *   NEG              returns -1, errno ENOSYS
 *   ERRNO            returns ENOSYS
 *   VOID             returns nothing */
#ifndef LIP_FRONT_VERBS_H
#define LIP_FRONT_VERBS_H

#define LIPF_VERBS(V) \
	V(ibv_create_comp_channel, "IBVERBS_1.0", NULL_ENOSYS) \
	V(ibv_destroy_comp_channel, "IBVERBS_1.0", ERRNO) \
	V(ibv_create_cq, "IBVERBS_1.1", NULL_ENOSYS) \
	V(ibv_destroy_cq, "IBVERBS_1.1", ERRNO) \
	V(ibv_resize_cq, "IBVERBS_1.1", ERRNO) \
	V(ibv_get_cq_event, "IBVERBS_1.1", NEG) \
	V(ibv_open_device, "IBVERBS_1.1", NULL_ENOSYS) \
	V(ibv_close_device, "IBVERBS_1.1", NEG) \
	V(ibv_create_qp, "IBVERBS_1.1", NULL_ENOSYS) \
	V(ibv_modify_qp, "IBVERBS_1.1", ERRNO) \
	V(ibv_query_qp, "IBVERBS_1.1", ERRNO) \
	V(ibv_destroy_qp, "IBVERBS_1.1", ERRNO) \
	V(ibv_create_srq, "IBVERBS_1.1", NULL_ENOSYS) \
	V(ibv_destroy_srq, "IBVERBS_1.1", ERRNO) \
	V(ibv_get_async_event, "IBVERBS_1.1", NEG) \
	V(ibv_ack_async_event, "IBVERBS_1.1", VOID) \
	V(ibv_reg_mr, "IBVERBS_1.1", NULL_ENOSYS) \
	V(ibv_rereg_mr, "IBVERBS_1.1", NEG) \
	V(ibv_dereg_mr, "IBVERBS_1.1", ERRNO) \
	V(ibv_reg_mr_iova2, "IBVERBS_1.8", NULL_EOPNOTSUPP) \
	V(ibv_reg_dmabuf_mr, "IBVERBS_1.12", NULL_EOPNOTSUPP) \
	V(rdma_get_cm_event, "RDMACM_1.0", NEG)

#endif
