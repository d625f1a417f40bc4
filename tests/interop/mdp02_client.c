/* A Majordomo MDP/0.2 client (ZeroMQ RFC 18) on plain libzmq, strict like the classic C clients.
 *
 * It uses a DEALER socket; with --pipeline it sends every request before reading any reply. Request i has
 * the one body frame "<prefix>-<i>". Each request must get exactly --partials PARTIAL replies, the k-th
 * being the echo with "#k" appended, then one FINAL echo (echoes optionally prefixed by a --tag); every
 * reply must carry the request's header and service and a known command, else the client fails. MDP has
 * no request id, so pipelined replies may come in any order. With --mmi it asks the broker's mmi.service
 * instead and prints the answer.
 *
 * REQUEST: "MDPC02", 0x01, service, body...   PARTIAL / FINAL: "MDPC02", 0x02 / 0x03, service, body...
 */
#include "mdp_common.h"

enum { REQUEST = 1, PARTIAL = 2, FINAL = 3 };
#define HEADER "MDPC02"

static void send_request(void *socket, const char *service, const char *body)
{
    send_str(socket, HEADER, 1);
    send_byte(socket, REQUEST, 1);
    send_str(socket, service, 1);
    send_str(socket, body, 0);
}

/* Wait for the next reply and check its envelope; return its command (PARTIAL or FINAL). Its only body
 * frame is frame 3. */
static int recv_reply(void *socket, const client_opts_t *opts, const char *service, msg_t *msg)
{
    if (!msg_recv(socket, msg, now_ms() + opts->timeout_ms))
        fail(EXIT_TIMEOUT, "timeout: no reply within %ld ms", opts->timeout_ms);
    if (!frame_is_str(msg, 0, HEADER))
        fail_msg(msg, "reply whose protocol header is not " HEADER);
    if (msg->size < 2 || frame_size(msg, 1) != 1)
        fail_msg(msg, "reply without a command frame");
    int command = *(const unsigned char *)frame_data(msg, 1);
    if (command != PARTIAL && command != FINAL)
        fail_msg(msg, "reply with an unknown command");
    if (!frame_is_str(msg, 2, service))
        fail_msg(msg, "reply for another service than the request's");
    if (msg->size != 4)
        fail_msg(msg, "reply without exactly one body frame");
    return command;
}

/* Ask mmi.service about a service; print "mmi.service SERVICE CODE". */
static void ask_mmi(void *socket, const client_opts_t *opts)
{
    msg_t msg;
    send_request(socket, "mmi.service", opts->mmi);
    if (recv_reply(socket, opts, "mmi.service", &msg) != FINAL)
        fail_msg(&msg, "MMI answered with a PARTIAL reply");
    if (frame_size(&msg, 3) != 3)
        fail_msg(&msg, "MMI reply is not a 3-digit code");
    printf("mmi.service %s %.3s\n", opts->mmi, frame_data(&msg, 3));
    msg_close(&msg);
}

/* Read replies until a FINAL one, accounting for each; return the index of the request it answers. */
static long read_final(void *socket, tally_t *tally)
{
    for (;;) {
        msg_t msg;
        int final = recv_reply(socket, tally->opts, tally->opts->service, &msg) == FINAL;
        long index = final ? tally_final(tally, &msg, 3) : tally_partial(tally, &msg, 3);
        if (tally->opts->verbose)
            print_reply(final ? "final" : "partial", &msg, 3);
        msg_close(&msg);
        if (final)
            return index;
    }
}

int main(int argc, char **argv)
{
    progname = "mdp02_client";
    client_opts_t opts = client_options(argc, argv, 1);
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(socket, opts.endpoint) != 0)
        fail(EXIT_USAGE, "cannot connect to %s: %s", opts.endpoint, zmq_strerror(zmq_errno()));

    if (opts.mmi) {
        ask_mmi(socket, &opts);
    } else {
        tally_t tally = tally_new(&opts);
        char body[256];
        for (long i = 0; i < opts.requests; i++) {
            snprintf(body, sizeof body, "%s-%ld", opts.prefix, i);
            send_request(socket, opts.service, body);
            if (!opts.pipeline && read_final(socket, &tally) != i)
                fail(EXIT_PROTOCOL, "reply to request %ld is the echo of another request", i);
        }
        while (tally.finals < opts.requests)
            read_final(socket, &tally);
        msg_t extra;
        if (opts.no_extra_ms && msg_recv(socket, &extra, now_ms() + opts.no_extra_ms))
            fail_msg(&extra, "unexpected extra reply after the last one");
        tally_finish(&tally);
    }
    zmq_close(socket);
    zmq_ctx_term(context);
    return 0;
}
