/* A Majordomo MDP/0.1 worker (ZeroMQ RFC 7) on plain libzmq: an echo service for interop tests.
 *
 * It behaves like the classic C workers: a DEALER socket, READY once per connection, heartbeats every
 * --heartbeat-ms, a new connection after --liveness heartbeat intervals of silence or on DISCONNECT, and it aborts on a
 * message that breaks the protocol. It echoes each request body (its first frame prefixed with --tag),
 * after working --delay-ms (heartbeating meanwhile), and exits after --count requests. --sink answers with the
 * body's size instead.
 *
 * Every frame after the DEALER's own: "", "MDPW01", command, arguments...
 */
#include "mdp_common.h"

enum { READY = 1, REQUEST = 2, REPLY = 3, HEARTBEAT = 4, DISCONNECT = 5 };
#define HEADER "MDPW01"

typedef struct {
    worker_opts_t opts;
    void *context;
    void *socket;
    int64_t heartbeat_at;
} worker_t;

static void send_command(worker_t *w, int command, int more)
{
    send_str(w->socket, "", 1);
    send_str(w->socket, HEADER, 1);
    send_byte(w->socket, command, more);
}

/* Open a new connection to the broker (dropping the old one) and announce the service on it. */
static void connect_to_broker(worker_t *w)
{
    int linger = 0;
    if (w->socket) {
        zmq_setsockopt(w->socket, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(w->socket);
    }
    w->socket = zmq_socket(w->context, ZMQ_DEALER);
    linger = 5000; /* a reply sent just before exiting must still leave */
    zmq_setsockopt(w->socket, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_connect(w->socket, w->opts.endpoint) != 0)
        fail(EXIT_USAGE, "cannot connect to %s: %s", w->opts.endpoint, zmq_strerror(zmq_errno()));
    send_command(w, READY, 1);
    send_str(w->socket, w->opts.service, 0);
    w->heartbeat_at = now_ms() + w->opts.heartbeat_ms;
}

static void heartbeat_if_due(worker_t *w)
{
    if (now_ms() >= w->heartbeat_at) {
        send_command(w, HEARTBEAT, 0);
        w->heartbeat_at = now_ms() + w->opts.heartbeat_ms;
    }
}

/* Work for ms milliseconds, still sending heartbeats so the broker does not presume this worker dead. */
static void work(worker_t *w, long ms)
{
    for (int64_t end = now_ms() + ms; now_ms() < end; heartbeat_if_due(w)) {
        int64_t next = w->heartbeat_at < end ? w->heartbeat_at : end;
        sleep_ms(next - now_ms());
    }
}

/* Serve one REQUEST: "", "MDPW01", 0x02, client address, "", body... */
static void serve(worker_t *w, msg_t *msg)
{
    if (msg->size < 5 || !frame_is_str(msg, 4, ""))
        fail_msg(msg, "REQUEST without a client address and an empty frame");
    if (w->opts.verbose) {
        printf("request ");
        print_bytes(stdout, msg->size > 5 ? frame_data(msg, 5) : "", msg->size > 5 ? frame_size(msg, 5) : 0);
        printf("\n");
        fflush(stdout);
    }
    work(w, w->opts.delay_ms);
    send_command(w, REPLY, 1);
    send_frame(w->socket, frame_data(msg, 3), frame_size(msg, 3), 1);
    send_str(w->socket, "", 1);
    send_reply_body(w->socket, msg, 5, &w->opts, "");
    if (w->opts.verbose) {
        printf("replied\n");
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    progname = "mdp01_worker";
    worker_t w = {worker_options(argc, argv, 0), zmq_ctx_new(), NULL, 0};
    connect_to_broker(&w);
    long served = 0;
    int64_t heard = now_ms(); /* when the broker last showed it is alive (any message does) */
    while (w.opts.count == 0 || served < w.opts.count) {
        int64_t expiry = heard + w.opts.liveness * w.opts.heartbeat_ms;
        msg_t msg;
        if (msg_recv(w.socket, &msg, w.heartbeat_at < expiry ? w.heartbeat_at : expiry)) {
            heard = now_ms();
            if (msg.size < 3 || !frame_is_str(&msg, 0, "") || !frame_is_str(&msg, 1, HEADER) ||
                frame_size(&msg, 2) != 1)
                fail_msg(&msg, "not an MDP/0.1 worker message");
            int command = *(const unsigned char *)frame_data(&msg, 2);
            if (command == REQUEST) {
                serve(&w, &msg);
                served++;
            } else if (command == DISCONNECT) {
                fprintf(stderr, "%s: the broker said DISCONNECT; reconnecting\n", progname);
                connect_to_broker(&w);
            } else if (command != HEARTBEAT || msg.size != 3) {
                fail_msg(&msg, "unexpected command from the broker");
            }
            msg_close(&msg);
        } else if (now_ms() >= expiry) {
            fprintf(stderr, "%s: the broker is silent; reconnecting\n", progname);
            sleep_ms(w.opts.reconnect_ms);
            connect_to_broker(&w);
            heard = now_ms();
        }
        heartbeat_if_due(&w);
    }
    zmq_close(w.socket);
    zmq_ctx_term(w.context);
    printf("served %ld requests\n", served);
    return 0;
}
