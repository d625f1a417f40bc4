// generaldomo/handshake.hpp: what the socket monitor of a client's connection says, and the cause it names.
// The same rules as the Python peers' (generaldomo/sansio/peer/handshake.py): fed libzmq's monitor events (the
// ZMQ_EVENT_* numbers of zmq.h), a HandshakeWatch names a failure that trying again will not fix: the broker
// dropped the handshake (a ROUTER broker, i.e. the router transport, does that to a CLIENT socket; so does a
// CURVE broker to a plaintext peer) or refused the mechanism (CURVE on one side only). A succeeded handshake
// clears the failure; "refused" says that the last attempts found nothing listening, and unreachable_after
// refused attempts in a row before any handshake succeeded are the failure "unreachable" (a wrong endpoint or
// port, or no broker running; about half a second, libzmq retrying every 100 ms or so), which the next accepted
// connection clears: a broker may start later, so the client decides what to do about it. It knows nothing of
// sockets, threads or clocks: the connection reads the monitor.
#pragma once

#ifndef ZMQ_BUILD_DRAFT_API
#define ZMQ_BUILD_DRAFT_API
#endif
#include <zmq.h>

#include <cstdint>
#include <optional>
#include <string>

namespace generaldomo {

// Why a connection to the broker cannot work as configured: kind() is "curve" (CURVE on one side only),
// "handshake" (the broker dropped the handshake: it serves the router transport, or it uses CURVE) or
// "unreachable" (nothing accepts connections at the endpoint).
struct HandshakeFailure {
    std::string kind;
    std::string cause;
};

namespace detail {

constexpr int watched_events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_CLOSED |
                               ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

constexpr int unreachable_after = 4;  // refused connection attempts in a row that make the failure "unreachable"

class HandshakeWatch {
public:
    explicit HandshakeWatch(std::string endpoint) : endpoint_(std::move(endpoint)) {}

    // Take one monitor event; true if it revealed a failure (failure() says which, until a handshake succeeds).
    bool feed(std::uint16_t event, std::int32_t value)
    {
        switch (event) {
        case ZMQ_EVENT_CONNECTED:
            greeting_ = true;
            refused_ = false;
            refusals_ = 0;
            if (failure_ && failure_->kind == "unreachable")
                failure_.reset();  // something accepts connections there now
            return false;
        case ZMQ_EVENT_CONNECT_RETRIED:
        case ZMQ_EVENT_CLOSED:
            refused_ = !greeting_;
            if (event == ZMQ_EVENT_CONNECT_RETRIED && refused_ && ++refusals_ >= unreachable_after &&
                !ever_succeeded_ && !failure_) {
                failure_ = HandshakeFailure{
                    "unreachable", "nothing accepts connections at " + endpoint_ +
                                       ": is a broker running, and is this the endpoint (host and port, or ipc "
                                       "path) it binds for the server transport?"};
                return true;
            }
            return false;
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
            greeting_ = false;
            failure_.reset();
            ever_succeeded_ = true;
            return false;
        default:
            break;
        }
        const bool dropped = event == ZMQ_EVENT_DISCONNECTED && greeting_;
        if (event == ZMQ_EVENT_DISCONNECTED || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
            event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            greeting_ = false;
        }
        const std::string at = "the broker at " + endpoint_;
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
            failure_ = HandshakeFailure{"curve", at + " uses CURVE, which the C++ client does not speak: connect it "
                                                      "to a plaintext --server link"};
            return true;
        }
        if (dropped || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL || event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
            event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            failure_ = HandshakeFailure{
                "handshake", at + " dropped the handshake: it serves the router transport (the C++ client needs the "
                                  "broker's --server link), or it uses CURVE (which the C++ client does not speak)"};
            return true;
        }
        return false;
    }

    const std::optional<HandshakeFailure> &failure() const { return failure_; }
    bool refused() const { return refused_; }          // the last attempts found nothing listening
    bool ever_succeeded() const { return ever_succeeded_; }

    // A new socket: its events start afresh; what the old one learnt of the broker stays.
    void restart() { greeting_ = false; }

private:
    std::string endpoint_;
    std::optional<HandshakeFailure> failure_;
    bool greeting_ = false;  // connected, handshake not finished yet
    bool ever_succeeded_ = false;
    bool refused_ = false;
    int refusals_ = 0;  // refused attempts since the last accepted connection
};

}  // namespace detail
}  // namespace generaldomo
