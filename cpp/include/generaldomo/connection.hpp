// generaldomo/connection.hpp: one CLIENT socket (libzmq draft API) connected to a broker's SERVER link, the
// poller its IO thread waits on (the socket, a wake-up pipe and the socket's monitor), and the outbox of
// messages the socket could not take yet. Any thread may send; only the IO thread receives, flushes, reads the
// monitor (a HandshakeWatch, see handshake.hpp; none for inproc://), reopens and closes. It knows nothing of
// the protocol carried, beyond unpacking frames.
#pragma once

#ifndef ZMQ_BUILD_DRAFT_API
#define ZMQ_BUILD_DRAFT_API
#endif
#include <zmq.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "generaldomo/handshake.hpp"
#include "generaldomo/protocol.hpp"

namespace generaldomo {

using Clock = std::chrono::steady_clock;

// A libzmq call failed; the message names the call and libzmq's reason.
class ZmqError : public std::runtime_error {
public:
    ZmqError(const std::string &what, int error) : std::runtime_error(what + ": " + zmq_strerror(error)), error_(error) {}
    int error() const { return error_; }

private:
    int error_;
};

namespace detail {

class Connection {
public:
    // Connects to endpoints.front(); reopen(true) moves to the next one, in turn.
    Connection(void *context, std::vector<std::string> endpoints)
        : context_(context), endpoints_(checked(std::move(endpoints))), endpoint_(endpoints_.front()),
          watch_(endpoint_), monitored_(endpoint_.rfind("inproc://", 0) != 0)
    {
        int fds[2];
        if (::pipe(fds) != 0)
            throw std::runtime_error("generaldomo: cannot create a wake-up pipe");
        wake_read_ = fds[0];
        wake_write_ = fds[1];
        for (int fd : fds) {
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
            ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        poller_ = zmq_poller_new();
        if (!poller_ || zmq_poller_add_fd(poller_, wake_read_, nullptr, ZMQ_POLLIN) != 0) {
            release();
            throw ZmqError("zmq_poller", zmq_errno());
        }
        try {
            socket_ = open_socket();
        } catch (...) {
            release();
            throw;
        }
        zmq_poller_add(poller_, socket_, nullptr, ZMQ_POLLIN);
        if (monitor_)
            zmq_poller_add(poller_, monitor_, nullptr, ZMQ_POLLIN);
    }

    Connection(const Connection &) = delete;
    Connection &operator=(const Connection &) = delete;
    ~Connection() { close(0); }

    // The endpoint connected (or connecting) to now; any thread.
    std::string endpoint() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return endpoint_;
    }

    static constexpr std::size_t by_reference = 64 * 1024;  // send(shared_ptr): below this a copy costs less

    // Send a packed message, or queue it if the socket cannot take it now; any thread. Dropped once closed.
    void send(std::string_view packed)
    {
        bool queued = false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (closed_)
                return;
            if (!outbox_.empty() || !write(packed)) {
                outbox_.emplace_back(packed);
                queued = true;
            }
        }
        if (queued)
            wake();
    }

    // Send a packed message that the caller keeps unchanged (a request, kept for resends): one of by_reference bytes
    // or more goes by reference, libzmq reading the caller's bytes (kept alive until libzmq is done: over inproc,
    // until the broker has forwarded them); a smaller one, or one that must wait in the outbox, as send() does.
    void send(const std::shared_ptr<const std::string> &packed)
    {
        if (packed->size() < by_reference) {
            send(std::string_view(*packed));
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (closed_ || (outbox_.empty() && write_shared(packed)))
                return;
            outbox_.emplace_back(*packed);
        }
        wake();
    }

    // Make the IO thread's wait() return; any thread.
    void wake()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!closed_) {
            const char byte = 0;
            [[maybe_unused]] auto written = ::write(wake_write_, &byte, 1);  // a full pipe already wakes
        }
    }

    bool backlogged()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return !outbox_.empty();
    }

    // Wait up to timeout_ms for a message, a monitor event or a wake-up (IO thread).
    void wait(long timeout_ms)
    {
        zmq_poller_event_t events[3];
        zmq_poller_wait_all(poller_, events, 3, timeout_ms);  // a timeout or EINTR only means: look again
    }

    // Feed the handshake watch the monitor events waiting now (IO thread); true if there were any.
    bool read_monitor()
    {
        bool any = false;
        for (int burst = 0; monitor_ && burst < 64; ++burst) {  // a reconnecting socket makes a few per attempt
            zmq_msg_t event;
            zmq_msg_init(&event);
            if (zmq_msg_recv(&event, monitor_, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&event);
                break;
            }
            if (zmq_msg_size(&event) == 6) {  // uint16 event, int32 value (zmq_socket_monitor, version 1)
                std::uint16_t number;
                std::int32_t value;
                std::memcpy(&number, zmq_msg_data(&event), sizeof number);
                std::memcpy(&value, static_cast<const char *>(zmq_msg_data(&event)) + 2, sizeof value);
                watch_.feed(number, value);
            }
            any = true;
            const bool more = zmq_msg_more(&event);
            zmq_msg_close(&event);
            while (more && skip_part()) {
            }
        }
        return any;
    }

    // What the monitor said of the connections so far (never fed for inproc://).
    const HandshakeWatch &handshake() const { return watch_; }
    std::size_t endpoint_count() const { return endpoints_.size(); }  // given: one, or several tried in turn

    // Consume wake-ups and write queued messages in order, as far as the socket takes them (IO thread).
    void flush()
    {
        char sink[256];
        while (::read(wake_read_, sink, sizeof sink) > 0) {
        }
        std::lock_guard<std::mutex> lock(mutex_);
        while (!closed_ && !outbox_.empty() && write(outbox_.front()))
            outbox_.pop_front();
    }

    // The next message's frames without blocking, or nullopt (IO thread). Parts that do not unpack are skipped.
    std::optional<Frames> recv()
    {
        while (true) {
            zmq_msg_t message;
            zmq_msg_init(&message);
            if (zmq_msg_recv(&message, socket_, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&message);
                return std::nullopt;
            }
            try {
                Frames frames = protocol::decode(
                    std::string_view(static_cast<const char *>(zmq_msg_data(&message)), zmq_msg_size(&message)));
                zmq_msg_close(&message);
                return frames;
            } catch (const protocol::DecodeError &) {
                zmq_msg_close(&message);  // the broker never sends this; skip it rather than stop
            }
        }
    }

    // Replace the socket by a new one connected to the same endpoint (next: to the next one, when there are
    // several; a host name is resolved again by libzmq on every attempt); what was queued is dropped (IO thread).
    // (linger_ms: how long the old socket keeps trying to send what it holds, e.g. a worker's DISCONNECT)
    void reopen(bool next = false, int linger_ms = 0)
    {
        void *old_monitor = monitor_;
        void *old_socket = socket_;
        if (next && endpoints_.size() > 1) {
            current_ = (current_ + 1) % endpoints_.size();
            std::lock_guard<std::mutex> lock(mutex_);
            endpoint_ = endpoints_[current_];
            monitored_ = endpoint_.rfind("inproc://", 0) != 0;
            watch_ = HandshakeWatch(endpoint_);
        }
        void *fresh = open_socket();  // and its monitor_
        std::lock_guard<std::mutex> lock(mutex_);
        zmq_poller_remove(poller_, old_socket);
        if (old_monitor)
            zmq_poller_remove(poller_, old_monitor);
        close_socket(old_socket, old_monitor, linger_ms);
        socket_ = fresh;
        zmq_poller_add(poller_, socket_, nullptr, ZMQ_POLLIN);
        if (monitor_)
            zmq_poller_add(poller_, monitor_, nullptr, ZMQ_POLLIN);
        watch_.restart();
        outbox_.clear();
    }

    // Write what the socket takes of the outbox, then close, keeping unsent messages linger_ms (IO thread).
    void close(int linger_ms)
    {
        if (socket_)
            flush();
        std::lock_guard<std::mutex> lock(mutex_);
        if (closed_)
            return;
        closed_ = true;
        if (socket_) {
            close_socket(socket_, monitor_, linger_ms);
            socket_ = monitor_ = nullptr;
        }
        release();
    }

private:
    static std::vector<std::string> checked(std::vector<std::string> endpoints)
    {
        if (endpoints.empty())
            throw std::invalid_argument("generaldomo: a broker endpoint is needed");
        return endpoints;
    }

    void *open_socket()
    {
        void *socket = zmq_socket(context_, ZMQ_CLIENT);
        if (!socket)
            throw ZmqError("zmq_socket(ZMQ_CLIENT)", zmq_errno());
        int linger = 0;
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
        // Socket options that must precede connect go here (the CURVE client keys, once the C++ peers
        // speak CURVE).
        void *monitor = monitored_ ? open_monitor(socket) : nullptr;
        if (zmq_connect(socket, endpoint_.c_str()) != 0) {
            const int error = zmq_errno();
            close_socket(socket, monitor, 0);
            throw ZmqError("zmq_connect(" + endpoint_ + ")", error);
        }
        monitor_ = monitor;
        return socket;
    }

    // A PAIR socket that libzmq writes the handshake events of socket to (before it connects); nullptr if the
    // monitor cannot be set up, which only costs the fast diagnosis.
    void *open_monitor(void *socket)
    {
        static std::atomic<unsigned> serial{0};
        char address[96];
        std::snprintf(address, sizeof address, "inproc://generaldomo-cpp-monitor-%p-%u-%u", static_cast<void *>(this),
                      static_cast<unsigned>(std::random_device{}()), ++serial);
        if (zmq_socket_monitor(socket, address, watched_events) != 0)
            return nullptr;
        void *monitor = zmq_socket(context_, ZMQ_PAIR);
        int linger = 0;
        if (!monitor || zmq_setsockopt(monitor, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
            zmq_connect(monitor, address) != 0) {
            if (monitor)
                zmq_close(monitor);
            zmq_socket_monitor(socket, nullptr, 0);
            return nullptr;
        }
        return monitor;
    }

    static void close_socket(void *socket, void *monitor, int linger_ms)
    {
        if (monitor) {
            zmq_socket_monitor(socket, nullptr, 0);  // stop the events before their reader goes
            zmq_close(monitor);
        }
        zmq_setsockopt(socket, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        zmq_close(socket);
    }

    bool skip_part()
    {
        zmq_msg_t part;
        zmq_msg_init(&part);
        const bool more = zmq_msg_recv(&part, monitor_, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&part);
        zmq_msg_close(&part);
        return more;
    }

    // Write without blocking; false if the socket cannot take the message now (caller holds mutex_).
    bool write(std::string_view packed) { return zmq_send(socket_, packed.data(), packed.size(), ZMQ_DONTWAIT) >= 0; }

    // write(), pointing libzmq at the caller's bytes, which a reference held until libzmq lets go keeps alive.
    bool write_shared(const std::shared_ptr<const std::string> &packed)
    {
        using Held = std::shared_ptr<const std::string>;
        auto *held = new Held(packed);
        auto release = [](void *, void *hint) { delete static_cast<Held *>(hint); };  // any thread
        zmq_msg_t message;
        if (zmq_msg_init_data(&message, const_cast<char *>(packed->data()), packed->size(), release, held) != 0) {
            delete held;
            return false;
        }
        if (zmq_msg_send(&message, socket_, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&message);  // releases held
            return false;
        }
        return true;
    }

    void release()
    {
        if (poller_)
            zmq_poller_destroy(&poller_);
        if (wake_read_ >= 0)
            ::close(wake_read_);
        if (wake_write_ >= 0)
            ::close(wake_write_);
        poller_ = nullptr;
        wake_read_ = wake_write_ = -1;
    }

    void *context_;
    std::vector<std::string> endpoints_;
    std::size_t current_ = 0;  // the endpoint connected to (IO thread)
    std::string endpoint_;     // endpoints_[current_]
    HandshakeWatch watch_;
    bool monitored_;             // not for inproc://, which has no handshake
    void *socket_ = nullptr;
    void *monitor_ = nullptr;    // the PAIR socket reading socket_'s monitor events, if any
    void *poller_ = nullptr;
    int wake_read_ = -1;
    int wake_write_ = -1;
    mutable std::mutex mutex_;  // guards socket_ against reopen and close, outbox_, closed_ and endpoint_
    std::deque<std::string> outbox_;
    bool closed_ = false;
};

// A libzmq context owned by a Client or Worker unless the caller lends one.
class Context {
public:
    explicit Context(void *borrowed) : context_(borrowed ? borrowed : zmq_ctx_new()), owned_(borrowed == nullptr)
    {
        if (!context_)
            throw ZmqError("zmq_ctx_new", zmq_errno());
    }
    Context(const Context &) = delete;
    Context &operator=(const Context &) = delete;
    ~Context()
    {
        if (owned_)
            zmq_ctx_term(context_);
    }
    void *get() const { return context_; }

private:
    void *context_;
    bool owned_;
};

}  // namespace detail
}  // namespace generaldomo
