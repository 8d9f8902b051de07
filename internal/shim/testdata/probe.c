/* An RDMA program that knows nothing of ibpath: opens the device, makes an
 * RC QP, connects it, posts and polls work, prints what it saw. With
 * "wait" it stops before destroying the QP until a line arrives on stdin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct ibv_device *fake_device(void);
void fake_raise_port(int type, int port);

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
	int event = argc > 2 && strcmp(argv[2], "event") == 0;
	/* "ex": the QP comes from ibv_create_qp_ex; "exwr": from
	 * ibv_create_qp_ex asking for the ibv_wr_* send API */
	int ex = argc > 2 && strncmp(argv[2], "ex", 2) == 0;
	int exwr = argc > 2 && strcmp(argv[2], "exwr") == 0;
	struct ibv_context *ctx = ibv_open_device(fake_device());
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp;
	if (ex) {
		struct ibv_qp_init_attr_ex iax = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = ia.cap, .pd = pd,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS};
		if (exwr) {
			iax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
			iax.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
		}
		qp = ibv_create_qp_ex(ctx, &iax);
	} else {
		qp = ibv_create_qp(pd, &ia);
	}
	if (!qp)
		return 5;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = 0x4242;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	a.ah_attr.grh.dgid.raw[12] = 10;
	a.ah_attr.grh.dgid.raw[15] = 2;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return 1;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return 1;
	if (event) {
		/* A cable pulled and plugged; this program never reads async
		 * events. */
		fake_raise_port(IBV_EVENT_PORT_ERR, 1);
		usleep(300000);
		fake_raise_port(IBV_EVENT_PORT_ACTIVE, 1);
		usleep(300000);
	}
	long sends = 0, recvs = 0, sum = 0;
	struct ibv_wc wc[16];
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr rw = {.wr_id = 1000000 + i}, *rbad;
		if (ibv_post_recv(qp, &rw, &rbad))
			return 2;
		struct ibv_send_wr sw = {.wr_id = i, .opcode = IBV_WR_RDMA_WRITE, .send_flags = (i % 4 == 3) ? IBV_SEND_SIGNALED : 0}, *sbad;
		if (ibv_post_send(qp, &sw, &sbad))
			return 3;
		int got;
		while ((got = ibv_poll_cq(cq, 16, wc)) > 0)
			for (int k = 0; k < got; k++) {
				if (wc[k].opcode & IBV_WC_RECV)
					recvs++;
				else
					sends++;
				sum += wc[k].wr_id;
			}
	}
	/* a WR the provider refuses: the application sees the provider's error */
	struct ibv_send_wr bw = {.wr_id = 0xbad, .opcode = IBV_WR_RDMA_WRITE}, *bbad = NULL;
	int ret = ibv_post_send(qp, &bw, &bbad);
	printf("qpn %#x sends %ld recvs %ld sum %ld refused %d bad_is_wr %d\n", qp->qp_num, sends, recvs, sum, ret, bbad == &bw);
	fflush(stdout);
	if (wait) {
		char line[16];
		printf("READY\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 4;
	}
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("done\n");
	return 0;
}
