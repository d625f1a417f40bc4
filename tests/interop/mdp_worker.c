/* A Majordomo worker on plain libzmq, an echo service for interop tests, in either dialect: MDP/0.1 (ZeroMQ
 * RFC 7) or MDP/0.2 (RFC 18), chosen when it is compiled (-DMDP_DIALECT=1 or 2: tests/interop/build.py makes
 * mdp01_worker and mdp02_worker).
 *
 * It behaves like the classic C workers: a DEALER socket, READY once per connection, heartbeats every
 * --heartbeat-ms, a new connection after --liveness heartbeat intervals of silence or on DISCONNECT, and it aborts
 * on a message that breaks the protocol. It echoes each request body, its first frame prefixed with --tag (--sink:
 * answers with the body's size instead); in MDP/0.2 it first sends --partials PARTIAL replies, the k-th being the
 * echo with "#k" appended to its first frame, then the FINAL. It works --delay-ms per request in all (heartbeating
 * meanwhile) and exits after --count requests.
 *
 * MDP/0.1, every message after the DEALER's own frames: "", "MDPW01", command, arguments...
 * MDP/0.2, every message: "MDPW02", command, arguments... (no empty frame first); with --delimiter an empty frame
 * first, as majortomo's broker (a REQ-style envelope) expects.
 */
#include "mdp_common.h"

#ifndef MDP_DIALECT
#error "compile with -DMDP_DIALECT=1 (MDP/0.1) or -DMDP_DIALECT=2 (MDP/0.2)"
#endif
enum { MDP02 = MDP_DIALECT == 2 };
enum { READY = 1, REQUEST = 2 };
/* The other commands' codes: MDP/0.1 has REPLY 3, HEARTBEAT 4, DISCONNECT 5; MDP/0.2 PARTIAL 3, FINAL 4, ... */
enum { PARTIAL = 3, FINAL = MDP02 ? 4 : 3, HEARTBEAT = FINAL + 1, DISCONNECT = FINAL + 2 };
#define HEADER (MDP02 ? "MDPW02" : "MDPW01")

typedef struct {
    worker_opts_t opts;
    void *context;
    void *socket;
    int64_t heartbeat_at;
} worker_t;

/* Whether every message starts with an empty frame: always in MDP/0.1, with --delimiter in MDP/0.2. */
static int delimited(const worker_t *w) { return !MDP02 || w->opts.delimiter; }

static void send_command(worker_t *w, int command, int more)
{
    if (delimited(w))
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

/* Serve one REQUEST, its empty first frame (if any) dropped: header, 0x02, client address, "", body... */
static void serve(worker_t *w, msg_t *msg)
{
    if (msg->size < 4 || !frame_is_str(msg, 3, ""))
        fail_msg(msg, "REQUEST without a client address and an empty frame");
    if (w->opts.verbose) {
        printf("request ");
        print_bytes(stdout, msg->size > 4 ? frame_data(msg, 4) : "", msg->size > 4 ? frame_size(msg, 4) : 0);
        printf("\n");
        fflush(stdout);
    }
    for (long k = 1; k <= w->opts.partials + 1; k++) {
        work(w, w->opts.delay_ms / (w->opts.partials + 1));
        char suffix[32] = "";
        if (k <= w->opts.partials)
            snprintf(suffix, sizeof suffix, "#%ld", k);
        send_command(w, k <= w->opts.partials ? PARTIAL : FINAL, 1);
        send_frame(w->socket, frame_data(msg, 2), frame_size(msg, 2), 1);
        send_str(w->socket, "", 1);
        send_reply_body(w->socket, msg, 4, &w->opts, suffix);
    }
    if (w->opts.verbose) {
        printf("replied\n");
        fflush(stdout);
    }
}

/* The empty frame a delimited message starts with goes; the others move up one place. */
static void drop_delimiter(msg_t *msg)
{
    if (msg->size < 1 || !frame_is_str(msg, 0, ""))
        fail_msg(msg, "no empty delimiter frame first");
    for (int i = 0; i + 1 < msg->size; i++)
        zmq_msg_move(&msg->frame[i], &msg->frame[i + 1]);
    zmq_msg_close(&msg->frame[msg->size - 1]);
    msg->size--;
}

int main(int argc, char **argv)
{
    progname = MDP02 ? "mdp02_worker" : "mdp01_worker";
    worker_t w = {worker_options(argc, argv, MDP02), zmq_ctx_new(), NULL, 0};
    connect_to_broker(&w);
    long served = 0;
    int64_t heard = now_ms(); /* when the broker last showed it is alive (any message does) */
    while (w.opts.count == 0 || served < w.opts.count) {
        int64_t expiry = heard + w.opts.liveness * w.opts.heartbeat_ms;
        msg_t msg;
        if (msg_recv(w.socket, &msg, w.heartbeat_at < expiry ? w.heartbeat_at : expiry)) {
            heard = now_ms();
            if (delimited(&w))
                drop_delimiter(&msg);
            if (msg.size < 2 || !frame_is_str(&msg, 0, HEADER) || frame_size(&msg, 1) != 1)
                fail_msg(&msg, MDP02 ? "not an MDP/0.2 worker message" : "not an MDP/0.1 worker message");
            int command = *(const unsigned char *)frame_data(&msg, 1);
            if (command == REQUEST) {
                serve(&w, &msg);
                served++;
            } else if (command == DISCONNECT) {
                fprintf(stderr, "%s: the broker said DISCONNECT; reconnecting\n", progname);
                connect_to_broker(&w);
            } else if (command != HEARTBEAT || msg.size != 2) {
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
