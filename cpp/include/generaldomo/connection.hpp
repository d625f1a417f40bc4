// generaldomo/connection.hpp: one CLIENT socket (libzmq draft API) connected to a broker's SERVER link, the
// poller its IO thread waits on (the socket and a wake-up pipe), and the outbox of messages the socket could
// not take yet. Any thread may send; only the IO thread receives, flushes, reopens and closes. It knows
// nothing of the protocol carried, beyond unpacking frames.
#pragma once

#ifndef ZMQ_BUILD_DRAFT_API
#define ZMQ_BUILD_DRAFT_API
#endif
#include <zmq.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

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
    Connection(void *context, std::string endpoint) : context_(context), endpoint_(std::move(endpoint))
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
    }

    Connection(const Connection &) = delete;
    Connection &operator=(const Connection &) = delete;
    ~Connection() { close(0); }

    const std::string &endpoint() const { return endpoint_; }

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

    // Wait up to timeout_ms for a message or a wake-up (IO thread).
    void wait(long timeout_ms)
    {
        zmq_poller_event_t events[2];
        zmq_poller_wait_all(poller_, events, 2, timeout_ms);  // a timeout or EINTR only means: look again
    }

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

    // Replace the socket by a new one connected to the same endpoint; what was queued is dropped (IO thread).
    void reopen()
    {
        void *fresh = open_socket();
        std::lock_guard<std::mutex> lock(mutex_);
        zmq_poller_remove(poller_, socket_);
        int linger = 0;
        zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(socket_);
        socket_ = fresh;
        zmq_poller_add(poller_, socket_, nullptr, ZMQ_POLLIN);
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
            zmq_setsockopt(socket_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
            zmq_close(socket_);
            socket_ = nullptr;
        }
        release();
    }

private:
    void *open_socket()
    {
        void *socket = zmq_socket(context_, ZMQ_CLIENT);
        if (!socket)
            throw ZmqError("zmq_socket(ZMQ_CLIENT)", zmq_errno());
        int linger = 0;
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
        // Socket options that must precede connect go here; the CURVE client keys will, once the broker
        // supports them (a later issue).
        if (zmq_connect(socket, endpoint_.c_str()) != 0) {
            const int error = zmq_errno();
            zmq_close(socket);
            throw ZmqError("zmq_connect(" + endpoint_ + ")", error);
        }
        return socket;
    }

    // Write without blocking; false if the socket cannot take the message now (caller holds mutex_).
    bool write(std::string_view packed) { return zmq_send(socket_, packed.data(), packed.size(), ZMQ_DONTWAIT) >= 0; }

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
    std::string endpoint_;
    void *socket_ = nullptr;
    void *poller_ = nullptr;
    int wake_read_ = -1;
    int wake_write_ = -1;
    std::mutex mutex_;  // guards socket_ against reopen and close, outbox_ and closed_
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
