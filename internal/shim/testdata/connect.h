/* The preload tests' programs connect their RC QP the same way: INIT,
 * then RTR toward a made-up peer (10.0.0.2, QP 0x4242), then RTS. */
#ifndef PROBE_CONNECT_H
#define PROBE_CONNECT_H

#include <string.h>
#include <infiniband/verbs.h>

/* probe_connect returns 0, or what the first failing ibv_modify_qp returned. */
static int probe_connect(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = 0x4242;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 10;
	a.ah_attr.grh.dgid.raw[15] = 2;
	a.ah_attr.port_num = 1;
	ret = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

#endif
