// generaldomo/client.hpp: generaldomo::Client, a GDP client over the SERVER transport that any number of
// threads share. It owns request ids and the matching of replies to the callers that wait for them: one IO
// thread receives, heartbeats the broker while requests are outstanding, sends them again (same ids) when the
// broker restarts or falls silent, and resolves each caller's future exactly once.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/random.h>  // getentropy: the kernel's CSPRNG

#include "generaldomo/connection.hpp"
#include "generaldomo/protocol.hpp"

namespace generaldomo {

namespace detail {

// Unpredictable bytes for request ids, from the kernel's CSPRNG (getentropy), 256 bytes per system call, so
// that a peer that saw one id on the wire cannot send the next ones first. Not thread-safe: lock around take().
class RandomPool {
public:
    std::string take(std::size_t size)
    {
        std::string out;
        while (out.size() < size) {
            if (at_ == pool_.size())
                refill();
            const std::size_t n = std::min(size - out.size(), pool_.size() - at_);
            out.append(reinterpret_cast<const char *>(pool_.data() + at_), n);
            at_ += n;
        }
        return out;
    }

private:
    void refill()
    {
        if (getentropy(pool_.data(), pool_.size()) != 0)
            throw std::system_error(errno, std::generic_category(), "getentropy");
        at_ = 0;
    }

    std::array<unsigned char, 256> pool_{};  // getentropy's largest request
    std::size_t at_ = pool_.size();
};

}  // namespace detail

// A successful result: the frames the worker returned and where the time went (see docs/protocol.rst).
struct Reply {
    Frames frames;
    std::optional<double> queued;  // seconds waiting in the broker before the (last) dispatch
    std::optional<double> served;  // seconds from that dispatch to the result
    Clock::time_point sent, received;
    bool partial = false;

    // The result when it is one frame (the usual case).
    const std::string &payload() const
    {
        if (frames.size() != 1)
            throw std::logic_error("the reply has " + std::to_string(frames.size()) + " frames; read .frames");
        return frames.front();
    }
};

// The broker or the worker answered with an error status (400, 404, 413, 429, 500, 503, 504...); a 429 may
// say after how long to send the request again (retry_after(): Client::request() waits and does so).
class RequestFailed : public std::runtime_error {
public:
    RequestFailed(int status, std::string reason, std::optional<double> retry_after = std::nullopt)
        : std::runtime_error(std::to_string(status) + ": " + reason), status_(status), reason_(std::move(reason)),
          retry_after_(retry_after)
    {
    }
    int status() const { return status_; }
    const std::string &reason() const { return reason_; }
    std::optional<double> retry_after() const { return retry_after_; }

private:
    int status_;
    std::string reason_;
    std::optional<double> retry_after_;
};

// The client was closed before the request was answered (or a request was made after close()).
class ClientClosed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Client::request() got no reply in time; the message says whether any broker answered at the endpoint.
class Timeout : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The broker at the endpoint refused the client's connection, which trying again will not fix: it serves the
// router transport, or it uses CURVE (kind() "handshake" or "curve"; what() names the cause and the fix).
// Requests fail with it within about a second of the failed handshake, and so do new ones until a handshake
// succeeds (the client keeps trying).
class HandshakeFailed : public std::runtime_error {
public:
    explicit HandshakeFailed(const HandshakeFailure &failure) : std::runtime_error(failure.cause), kind_(failure.kind)
    {
    }
    const std::string &kind() const { return kind_; }

private:
    std::string kind_;
};

// Nothing accepts connections at the endpoint (kind() "unreachable"): no broker runs there, or the host, port or
// path is wrong. A client that never reached a broker fails its requests with it within about a second, unless
// ClientOptions::fail_unreachable is false (a client that starts before its broker).
class BrokerUnreachable : public HandshakeFailed {
public:
    using HandshakeFailed::HandshakeFailed;
};

struct ClientOptions {
    std::chrono::milliseconds heartbeat_interval{2500};
    int liveness = 3;          // silent heartbeat intervals before the client reconnects
    void *context = nullptr;   // a libzmq context to use; by default the client makes its own
    std::string tenant;        // the tenant of this client's requests (empty: the broker's default, per connection)
    bool deadlines = true;     // request() sends its timeout as the request's deadline (off: for an older broker)
    bool fail_unknown = true;  // 404 at once for a service nobody serves (off: wait for a worker that starts later)
    bool fail_unreachable = true;  // BrokerUnreachable within about a second when nothing accepts connections at
                                   // the one endpoint and no broker answered yet (off: wait for a broker)
    bool backpressure = true;  // request() waits out a 429's retry_after and sends again, within its timeout
};

// What a request may carry besides its payload (docs/protocol.rst, "Request fields"): a deadline (the broker
// answers 504 instead of dispatching it later, and tells a worker running it), a tenant (empty: the client's)
// and a priority (-5..5, higher first within the tenant), and the W3C trace context of the caller's span (the
// worker's span is its child): a traceparent ("00-<trace id>-<span id>-<flags>"; empty: none; std::invalid_argument
// when malformed) and its tracestate (trimmed to the room the request's fields leave); a delay or a not-before time
// (not both: std::invalid_argument), before which the broker does not dispatch it (held apart from the queue
// meanwhile; a resend carries the delay then left).
struct RequestFields {
    std::optional<std::chrono::milliseconds> deadline;
    std::optional<std::chrono::milliseconds> delay;
    std::optional<std::chrono::system_clock::time_point> not_before;
    std::string tenant;
    int priority = 0;
    std::optional<bool> fail_unknown;  // 404 at once for a service nobody serves (default: the client's option)
    std::string traceparent;
    std::string tracestate;
};

class Client {
public:
    using OnPartial = std::function<void(const Reply &)>;

    explicit Client(std::string endpoint, ClientOptions options = {})
        : Client(std::vector<std::string>{std::move(endpoint)}, options)
    {
    }

    // Several endpoints (a replacement broker started elsewhere): the first, and the next one, in turn, each
    // time the broker falls silent.
    explicit Client(std::vector<std::string> endpoints, ClientOptions options = {})
        : options_(options), context_(options.context), connection_(context_.get(), std::move(endpoints))
    {
        thread_ = std::thread([this] { run(); });
    }

    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;
    ~Client() { close(); }

    // Send a request; the future gives its Reply or throws RequestFailed (or ClientClosed). on_partial is
    // called on the IO thread with each partial result a streaming worker sends; keep it short.
    std::future<Reply> submit(std::string_view description, const Frames &frames = {}, OnPartial on_partial = {},
                              RequestFields fields = {})
    {
        return start(description, frames, std::move(on_partial), std::move(fields)).second;
    }

    // Send a request and wait up to timeout for its reply (the timeout is also its deadline, unless the options
    // say deadlines = false or fields give one); throws Timeout (also when the broker's 504 for that deadline
    // comes first: the same moment), RequestFailed, HandshakeFailed (BrokerUnreachable) or ClientClosed. A 429
    // with a retry_after is backpressure: the request is sent again after that long, while the timeout allows
    // (unless ClientOptions::backpressure is false).
    Reply request(std::string_view description, const Frames &frames, std::chrono::milliseconds timeout,
                  RequestFields fields = {})
    {
        const bool own_deadline = !fields.deadline && options_.deadlines;
        const auto end = Clock::now() + timeout;
        for (int attempt = 0;; ++attempt) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(end - Clock::now());
            if (own_deadline)
                fields.deadline = left;
            auto [id, future] = start(description, frames, {}, fields);
            if (future.wait_for(left) != std::future_status::ready) {
                forget(id);
                throw Timeout(timeout_message(description, timeout));
            }
            try {
                return future.get();
            } catch (const RequestFailed &error) {
                if (error.status() == protocol::expired && own_deadline &&
                    error.reason().rfind("the request's deadline", 0) == 0)
                    throw Timeout("no reply to " + std::string(description) + " within " +
                                  std::to_string(timeout.count()) + " ms (the broker: " + error.reason() + ")");
                const auto pause = error.retry_after();
                if (error.status() != protocol::too_many || !options_.backpressure || !pause || attempt >= 10000)
                    throw;
                const auto wait = std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(std::min(*pause, 30.0)));
                if (Clock::now() + wait >= end)
                    throw;
                std::this_thread::sleep_for(wait);  // then the same request again, once there is room
            }
        }
    }

    // Stop the IO thread; requests still waiting fail with ClientClosed. Idempotent.
    void close()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (closed_)
                return;
            closed_ = true;
        }
        connection_.wake();
        thread_.join();
        std::unordered_map<std::string, Pending> waiting;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            waiting.swap(waiting_);
        }
        for (auto &entry : waiting)
            entry.second.promise.set_exception(
                std::make_exception_ptr(ClientClosed("the client was closed before the reply came")));
    }

    std::string endpoint() const { return connection_.endpoint(); }  // connected (or connecting) to now
    bool broker_answered() const { return answered_; }  // a broker has answered at the endpoint (ever)
    std::uint64_t resent() const { return resent_; }                    // requests sent again
    std::uint64_t reconnects() const { return reconnects_; }            // fresh sockets after silence
    std::uint64_t replies_dropped() const { return replies_dropped_; }  // duplicates, or answers nobody awaits

private:
    struct Pending {
        std::promise<Reply> promise;
        std::shared_ptr<const std::string> packed;  // the REQUEST as sent, for resending
        Clock::time_point sent;
        OnPartial on_partial;
        std::optional<Clock::time_point> deadline;  // a resend carries the time then left
        std::string description, tenant, traceparent, tracestate;
        Frames frames;
        int priority = 0;
        unsigned char flags = 0;
        std::optional<Clock::time_point> not_before;  // a resend carries the delay then left
    };

    std::pair<std::string, std::future<Reply>> start(std::string_view description, const Frames &frames,
                                                     OnPartial on_partial, RequestFields fields)
    {
        std::string id;
        {
            std::lock_guard<std::mutex> lock(ids_mutex_);
            id = ids_.take(request_id_bytes);  // unique across clients, and unpredictable
        }
        const std::string &tenant = fields.tenant.empty() ? options_.tenant : fields.tenant;
        const unsigned char flags = fields.fail_unknown.value_or(options_.fail_unknown) ? protocol::flag_known_service : 0;
        if (fields.delay && fields.not_before)
            throw std::invalid_argument("give a request's delay or its not-before time, not both");
        std::optional<std::chrono::milliseconds> delay = fields.delay;
        if (fields.not_before)
            delay = std::chrono::ceil<std::chrono::milliseconds>(*fields.not_before - std::chrono::system_clock::now());
        const std::string packed_fields = protocol::request_fields(fields.deadline, tenant, fields.priority, flags,
                                                                   fields.traceparent, fields.tracestate, delay);
        auto packed = std::make_shared<const std::string>(protocol::request(id, description, frames, packed_fields));
        const auto now = Clock::now();
        Pending pending{{}, packed, now, std::move(on_partial), std::nullopt, {}, {}, {}, {}, {}, fields.priority, flags, {}};
        if (delay && delay->count() > 0)
            pending.not_before = now + *delay;
        if (fields.deadline || pending.not_before) {  // kept to send the times left again, should the broker need it
            if (fields.deadline)
                pending.deadline = now + *fields.deadline;
            pending.description = std::string(description);
            pending.tenant = tenant;
            pending.traceparent = fields.traceparent;
            pending.tracestate = fields.tracestate;
            pending.frames = frames;
        }
        std::future<Reply> future = pending.promise.get_future();
        bool first;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (closed_)
                throw ClientClosed("the client is closed");
            if (refused_) {
                pending.promise.set_exception(refusal());
                return {std::move(id), std::move(future)};
            }
            first = waiting_.empty();
            waiting_.emplace(id, std::move(pending));
        }
        connection_.send(packed);
        if (first)
            connection_.wake();  // an idle IO thread starts heartbeating now
        return {std::move(id), std::move(future)};
    }

    void forget(const std::string &id)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        waiting_.erase(id);
    }

    std::string timeout_message(std::string_view description, std::chrono::milliseconds timeout)
    {
        std::string message =
            "no reply to " + std::string(description) + " within " + std::to_string(timeout.count()) + " ms";
        if (answered_)
            return message;
        message += "; no broker has answered at " + endpoint() + " over the server transport";
        std::lock_guard<std::mutex> lock(mutex_);
        if (nothing_listens_)
            return message + ": nothing accepts connections there (is a broker running?)";
        return message + " (is one running there? does it serve the router transport instead?)";
    }

    // Follow the socket monitor (IO thread): a failed handshake fails what is waiting, and what is submitted
    // until a handshake succeeds, with HandshakeFailed.
    void follow_handshake()
    {
        const detail::HandshakeWatch &watch = connection_.handshake();
        std::unordered_map<std::string, Pending> failed;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            nothing_listens_ = watch.refused();
            refused_ = watch.failure();
            if (refused_ && refused_->kind == "unreachable") {
                if (!options_.fail_unreachable || answered_ || connection_.endpoint_count() > 1)
                    refused_.reset();  // waited for: libzmq goes on trying
                else
                    refused_->cause += " (to wait for a broker that starts later: ClientOptions::fail_unreachable "
                                       "= false)";
            }
            if (refused_)
                failed.swap(waiting_);
        }
        for (auto &entry : failed)
            entry.second.promise.set_exception(refusal());
    }

    // What a refused connection fails requests with (mutex_ held, refused_ set).
    std::exception_ptr refusal() const
    {
        if (refused_->kind == "unreachable")
            return std::make_exception_ptr(BrokerUnreachable(*refused_));
        return std::make_exception_ptr(HandshakeFailed(*refused_));
    }

    bool idle()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return waiting_.empty();
    }

    bool closing()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return closed_;
    }

    // ---------------------------------------------------------------------------------------- IO thread

    void run()
    {
        using std::chrono::milliseconds;
        const auto interval = options_.heartbeat_interval;
        const auto expiry = interval * options_.liveness;
        std::optional<std::string> instance;
        auto next_heartbeat = Clock::now();
        bool waiting = false;                 // requests were outstanding at the last look
        Clock::time_point silent_since;       // then: when the broker last spoke
        const std::string heartbeat = protocol::client_heartbeat_message();
        while (!closing()) {
            long timeout = 1000;  // idle: nothing to heartbeat for; submit() and close() wake the wait
            if (connection_.backlogged()) {
                timeout = 10;
            } else if (!idle()) {
                const auto due = std::chrono::duration_cast<milliseconds>(next_heartbeat - Clock::now()).count();
                timeout = std::max<long>(0, std::min<long>(1000, static_cast<long>(due)));
            }
            connection_.wait(timeout);
            connection_.flush();
            if (connection_.read_monitor())
                follow_handshake();
            bool heard = false;
            while (auto frames = connection_.recv()) {
                heard = answered_ = true;
                if (auto announced = protocol::parse_broker_instance(*frames)) {
                    if (instance && *announced != *instance)
                        resend();  // the broker restarted: it knows none of our requests
                    instance = std::move(announced);
                } else {
                    on_reply(std::move(*frames));
                }
            }
            const auto now = Clock::now();
            if (idle()) {
                waiting = false;
                continue;
            }
            if (heard || !waiting) {
                silent_since = now;
                waiting = true;
            } else if (now - silent_since > expiry) {
                ++reconnects_;
                connection_.reopen(true);  // silent: the next endpoint, if there are several
                resend();
                silent_since = now;
            }
            if (now >= next_heartbeat) {
                connection_.send(heartbeat);
                next_heartbeat = now + interval;
            }
        }
        connection_.close(0);
    }

    void resend()
    {
        std::vector<std::shared_ptr<const std::string>> outstanding;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            outstanding.reserve(waiting_.size());
            const auto now = Clock::now();
            for (auto &entry : waiting_) {
                Pending &pending = entry.second;
                if (pending.deadline || pending.not_before) {
                    std::optional<std::chrono::milliseconds> left, later;
                    if (pending.deadline)
                        left = std::chrono::ceil<std::chrono::milliseconds>(*pending.deadline - now);
                    if (pending.not_before)
                        later = std::chrono::ceil<std::chrono::milliseconds>(*pending.not_before - now);
                    const std::string fields =
                        protocol::request_fields(left, pending.tenant, pending.priority, pending.flags,
                                                 pending.traceparent, pending.tracestate, later);
                    pending.packed = std::make_shared<const std::string>(
                        protocol::request(entry.first, pending.description, pending.frames, fields));
                }
                outstanding.push_back(pending.packed);
            }
        }
        resent_ += outstanding.size();
        for (const auto &packed : outstanding)
            connection_.send(packed);
    }

    void on_reply(Frames &&frames)
    {
        auto reply = protocol::parse_client_reply(std::move(frames));
        if (!reply)
            return;  // not a GDP reply: the broker never sends one
        if (!reply->final) {
            OnPartial callback;
            Clock::time_point sent;
            {
                std::lock_guard<std::mutex> lock(mutex_);
                auto found = waiting_.find(reply->request_id);
                if (found == waiting_.end() || !found->second.on_partial)
                    return;
                callback = found->second.on_partial;
                sent = found->second.sent;
            }
            Reply partial{std::move(reply->body), std::nullopt, std::nullopt, sent, Clock::now(), true};
            try {
                callback(partial);
            } catch (...) {  // a faulty callback must not stop the IO thread
            }
            return;
        }
        std::optional<Pending> pending;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto found = waiting_.find(reply->request_id);
            if (found != waiting_.end()) {
                pending.emplace(std::move(found->second));
                waiting_.erase(found);
            }
        }
        if (!pending) {
            ++replies_dropped_;
            return;
        }
        if (reply->status == protocol::ok) {
            Reply result{std::move(reply->body), std::nullopt, std::nullopt, pending->sent, Clock::now(), false};
            if (auto timing = protocol::parse_timing(reply->timing)) {
                result.queued = timing->first;
                result.served = timing->second;
            }
            pending->promise.set_value(std::move(result));
        } else {
            std::optional<double> retry_after;
            if (reply->status == protocol::too_many && reply->body.size() >= 2)
                retry_after = protocol::parse_retry_after(reply->body[1]);
            std::string reason = reply->body.empty() ? std::string() : std::move(reply->body.front());
            pending->promise.set_exception(
                std::make_exception_ptr(RequestFailed(reply->status, std::move(reason), retry_after)));
        }
    }

    ClientOptions options_;
    detail::Context context_;
    detail::Connection connection_;
    static constexpr std::size_t request_id_bytes = 16;
    detail::RandomPool ids_;
    std::mutex ids_mutex_;  // guards ids_
    std::mutex mutex_;  // guards waiting_, closed_, refused_ and nothing_listens_
    std::unordered_map<std::string, Pending> waiting_;
    bool closed_ = false;
    std::optional<HandshakeFailure> refused_;  // the connection's handshake failed (until one succeeds)
    bool nothing_listens_ = false;             // the last connection attempts found nothing listening
    std::atomic<bool> answered_{false};        // a broker has answered at the endpoint
    std::atomic<std::uint64_t> resent_{0}, reconnects_{0}, replies_dropped_{0};
    std::thread thread_;  // last: started once everything above exists
};

}  // namespace generaldomo
