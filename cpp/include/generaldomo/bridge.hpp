// generaldomo/bridge.hpp: generaldomo::Bridge, the SERVER<->MDP device of the Python bridge
// (generaldomo/io/bridge.py) in C++, header-only: thread-safe generaldomo Client peers in front of any standard
// Majordomo (MDP/0.1) broker, e.g. one embedded in the same program (its ROUTER on inproc:// of the same context).
//
// It owns the translation, with the Python bridge's rules. It accepts generaldomo clients on a SERVER socket and
// forwards each REQUEST (or REQUEST+FIELDS: MDP carries no fields, they stay behind) as an MDP/0.1 client request
// to the broker. MDP carries no request id and a broker may answer out of order, so every request in flight gets a
// DEALER of its own, taken from a pool of idle ones; the reply on that DEALER is the answer to that request, sent to
// the client as FINAL 200 with its request id (502 if the reply is not an MDP/0.1 reply for that service). At most
// max_in_flight requests are in flight (so at most that many DEALERs are open), and at most client_share of them
// (at least one) for one client connection, so that one client cannot take every place. A request beyond either
// waits in its connection's queue, in order, until a place frees (places go to the waiting connections in turn);
// a queue holds at most connection_queue_bytes of requests (charged to the connection) and all queues at most
// total_queue_bytes. A request beyond those, or one for which no DEALER can be opened, gets FINAL 429 at once
// with a retry_after (bridge::retry_after, which Client::request waits out before sending the request again). A
// CANCEL takes a request out of its queue; a silent client's queue goes. A retry of a request in flight or waiting (same client, same id) is
// not forwarded twice. The bridge answers a client's HEARTBEAT itself, naming its own instance, so that clients
// send their requests again when the bridge restarts, and the request ids the client asks about that it has not in
// flight, so that the client sends those again; a CANCEL closes the request's DEALER (a late reply is not
// delivered); a client silent for liveness heartbeat intervals is forgotten and the DEALERs of its requests closed;
// a DEALER idle for idle_timeout is closed. Field bounds are those of generaldomo/sansio/wire/limits.py: a message
// beyond them, or one that does not unpack, is dropped and counted (a request whose description is too long gets
// 400). An error while handling one message drops it, counted in internal_errors(); an error that stops the
// bridge's thread is rethrown by check() and stop(). Plaintext only (the Python bridge does CURVE).
#pragma once

#ifndef ZMQ_BUILD_DRAFT_API
#define ZMQ_BUILD_DRAFT_API
#endif
#include <zmq.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "generaldomo/connection.hpp"
#include "generaldomo/protocol.hpp"

namespace generaldomo {

// The bridge's thread stopped because of an error: it serves nothing any more.
class BridgeFailed : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct BridgeOptions {
    std::chrono::milliseconds heartbeat_interval{2500};  // use the clients' interval
    int liveness = 3;                                      // silent intervals before a client is forgotten
    std::chrono::milliseconds idle_timeout{30000};         // an idle DEALER is closed after this long
    std::size_t max_in_flight = 512;                       // requests in flight at once; beyond: the queues
    std::size_t connection_queue_bytes = 16u << 20;        // bytes one connection may have waiting, 429 beyond
    std::size_t total_queue_bytes = 128u << 20;            // bytes all connections may have waiting, 429 beyond
    std::size_t max_message = (64u << 20) + (64u << 10);   // bytes of a client's message (libzmq drops larger)
    std::size_t max_frames = 1024;                         // frames of a client's message
    void *context = nullptr;                               // a libzmq context; by default the bridge makes one
};

namespace bridge {  // the bridge's side of the GDP client messages, and MDP/0.1 as a client (docs/protocol.rst)

inline constexpr std::size_t max_request_id = 255, max_description = 4096, max_reasked = 64, max_fields = 256;
inline constexpr double client_share = 0.875;  // of max_in_flight, what one client connection may have in flight
inline constexpr std::string_view retry_after = "0.250";  // a 429's retry-after frame: seconds, as the Python bridge's
inline constexpr std::size_t queued_overhead = 64;  // bytes a waiting request is charged beyond its id, name, body
inline constexpr char request = 0x01, heartbeat = 0x04, cancel = 0x05, fields_request = 0x06;
inline constexpr std::string_view mdp_client = "MDPC01";

// What a client sent: a request (command request or fields_request), a heartbeat, a cancel, or nothing valid.
struct ClientMessage {
    char command = 0;
    std::string request_id, description;
    Frames body;  // a heartbeat: the request ids it asks about
    bool long_description = false;  // a request whose description exceeds max_description: answered 400
};

// Whether a fields frame is well formed: entries of a tag byte, a length byte and that many bytes.
inline bool fields_fit(std::string_view frame)
{
    if (frame.size() > max_fields)
        return false;
    std::size_t at = 0;
    while (at < frame.size()) {
        if (frame.size() - at < 2 || frame.size() - at - 2 < static_cast<unsigned char>(frame[at + 1]))
            return false;
        at += 2 + static_cast<unsigned char>(frame[at + 1]);
    }
    return true;
}

inline std::optional<ClientMessage> parse_client(Frames &&frames)
{
    if (frames.size() < 2 || frames[0] != protocol::client_header || frames[1].size() != 1)
        return std::nullopt;
    ClientMessage message;
    message.command = frames[1][0];
    if (message.command == heartbeat) {
        if (frames.size() - 2 > max_reasked)
            return std::nullopt;
        for (auto id = frames.begin() + 2; id != frames.end(); ++id)
            if (id->empty() || id->size() > max_request_id)
                return std::nullopt;
        message.body.assign(std::make_move_iterator(frames.begin() + 2), std::make_move_iterator(frames.end()));
        return message;
    }
    if (frames.size() < 3 || frames[2].empty() || frames[2].size() > max_request_id)
        return std::nullopt;
    message.request_id = std::move(frames[2]);
    if (message.command == cancel)
        return frames.size() == 3 ? std::optional<ClientMessage>(std::move(message)) : std::nullopt;
    const std::size_t body = message.command == fields_request ? 5 : 4;
    if ((message.command != request && message.command != fields_request) || frames.size() < body ||
        (message.command == fields_request && !fields_fit(frames[4])))
        return std::nullopt;
    message.long_description = frames[3].size() > max_description;
    message.description = std::move(frames[3]);
    message.body.assign(std::make_move_iterator(frames.begin() + body), std::make_move_iterator(frames.end()));
    return message;
}

// FINAL: GDPC01, 0x03, request id, status, timing (empty: the bridge does not know it), body...
inline std::string final_reply(std::string_view request_id, int status, const Frames &body)
{
    std::string out;
    protocol::append_frame(out, protocol::client_header);
    protocol::append_frame(out, std::string_view(&protocol::client_final, 1));
    protocol::append_frame(out, request_id);
    protocol::append_frame(out, std::to_string(status));
    protocol::append_frame(out, "");
    for (const auto &frame : body)
        protocol::append_frame(out, frame);
    return out;
}

// The answer to a client HEARTBEAT: GDPC01, 0x04, the bridge's instance, the asked-about ids it does not know.
inline std::string heartbeat_answer(std::string_view instance, const Frames &unknown)
{
    std::string out;
    protocol::append_frame(out, protocol::client_header);
    protocol::append_frame(out, std::string_view(&protocol::client_heartbeat, 1));
    protocol::append_frame(out, instance);
    for (const auto &id : unknown)
        protocol::append_frame(out, id);
    return out;
}

// The body of an MDP/0.1 reply as a DEALER receives it ("", "MDPC01", service, body...) for `service`, or nullopt.
inline std::optional<Frames> parse_mdp_reply(Frames &&frames, std::string_view service)
{
    if (frames.size() < 3 || !frames[0].empty() || frames[1] != mdp_client || frames[2] != service)
        return std::nullopt;
    return Frames(std::make_move_iterator(frames.begin() + 3), std::make_move_iterator(frames.end()));
}

}  // namespace bridge

class Bridge {
public:
    // Binds the SERVER endpoints and opens a first DEALER to the broker (so that a bad endpoint throws ZmqError
    // here), then serves on a thread of its own until stop() or destruction.
    Bridge(const std::vector<std::string> &server, std::string broker, BridgeOptions options = {})
        : options_(options),
          max_per_client_(std::max<std::size_t>(1, static_cast<std::size_t>(options.max_in_flight * bridge::client_share))),
          broker_(std::move(broker)),
          context_(options.context)
    {
        std::random_device random;
        for (int i = 0; i < 4; ++i)
            instance_.push_back(static_cast<char>(random() & 0xFF));
        int fds[2];
        if (::pipe(fds) != 0)
            throw std::runtime_error("generaldomo::Bridge: cannot create a wake-up pipe");
        wake_read_ = fds[0];
        wake_write_ = fds[1];
        for (int fd : fds)
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        try {
            open(server);
        } catch (...) {
            close_all();
            throw;
        }
        thread_ = std::thread([this] { serve(); });
    }

    Bridge(const Bridge &) = delete;
    Bridge &operator=(const Bridge &) = delete;
    ~Bridge()
    {
        try {
            stop();
        } catch (...) {
        }
    }

    // The concrete SERVER endpoints (with the ports that "*" got).
    const std::vector<std::string> &endpoints() const { return endpoints_; }

    // Stop serving and wait for the thread; throws BridgeFailed if it had stopped because of an error. Idempotent.
    void stop()
    {
        {
            std::lock_guard<std::mutex> lock(stop_mutex_);
            if (thread_.joinable()) {
                const char byte = 0;
                [[maybe_unused]] auto written = ::write(wake_write_, &byte, 1);
                thread_.join();
                close_all();
            }
        }
        check();
    }

    // Throws BridgeFailed if the bridge's thread stopped because of an error.
    void check() const
    {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!failure_.empty())
            throw BridgeFailed("the bridge stopped: " + failure_);
    }

    bool serving() const { return running_; }
    std::uint64_t forwarded() const { return forwarded_; }                  // requests sent to the broker
    std::uint64_t refused_in_flight() const { return refused_in_flight_; }  // requests answered 429
    std::size_t queued() const { return queued_count_; }  // requests waiting in the connections' queues
    std::uint64_t dropped() const { return dropped_; }                      // client messages dropped as malformed
    std::uint64_t internal_errors() const { return internal_errors_; }      // messages whose handling threw
    std::size_t dealers() const { return dealers_; }                        // DEALERs open (in flight or idle)

private:
    struct InFlight {
        std::uint32_t client;
        std::string request_id, description;
    };

    void open(const std::vector<std::string> &server)
    {
        server_ = zmq_socket(context_.get(), ZMQ_SERVER);
        if (!server_)
            throw ZmqError("zmq_socket(ZMQ_SERVER)", zmq_errno());
        int linger = 0;
        const std::int64_t largest = static_cast<std::int64_t>(options_.max_message);
        zmq_setsockopt(server_, ZMQ_LINGER, &linger, sizeof linger);
        zmq_setsockopt(server_, ZMQ_MAXMSGSIZE, &largest, sizeof largest);
        for (const auto &endpoint : server) {
            if (zmq_bind(server_, endpoint.c_str()) != 0)
                throw ZmqError("zmq_bind(" + endpoint + ")", zmq_errno());
            char bound[1024];
            size_t size = sizeof bound;
            const bool known = zmq_getsockopt(server_, ZMQ_LAST_ENDPOINT, bound, &size) == 0;
            endpoints_.push_back(known ? std::string(bound) : endpoint);
        }
        poller_ = zmq_poller_new();
        if (!poller_ || zmq_poller_add(poller_, server_, nullptr, ZMQ_POLLIN) != 0 ||
            zmq_poller_add_fd(poller_, wake_read_, nullptr, ZMQ_POLLIN) != 0)
            throw ZmqError("zmq_poller", zmq_errno());
        idle_.emplace_back(new_dealer(), Clock::now());  // the first DEALER: a bad broker endpoint throws now
    }

    void *new_dealer()
    {
        void *dealer = zmq_socket(context_.get(), ZMQ_DEALER);
        if (!dealer)
            throw ZmqError("zmq_socket(ZMQ_DEALER)", zmq_errno());
        int linger = 0;
        zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_connect(dealer, broker_.c_str()) != 0 || zmq_poller_add(poller_, dealer, dealer, ZMQ_POLLIN) != 0) {
            const int error = zmq_errno();
            zmq_close(dealer);
            throw ZmqError("zmq_connect(" + broker_ + ")", error);
        }
        ++dealers_;
        return dealer;
    }

    void close_dealer(void *dealer)
    {
        zmq_poller_remove(poller_, dealer);
        zmq_close(dealer);
        --dealers_;
    }

    void close_all()
    {
        for (auto &entry : in_flight_)
            close_dealer(entry.first);
        for (auto &entry : idle_)
            close_dealer(entry.first);
        in_flight_.clear();
        by_request_.clear();
        per_client_.clear();
        idle_.clear();
        if (poller_)
            zmq_poller_destroy(&poller_);
        if (server_)
            zmq_close(server_);
        server_ = nullptr;
        for (int *fd : {&wake_read_, &wake_write_})
            if (*fd >= 0) {
                ::close(*fd);
                *fd = -1;
            }
    }

    // ------------------------------------------------------------------------------------------- the thread

    void serve()
    {
        running_ = true;
        try {
            auto next_sweep = Clock::now() + options_.heartbeat_interval;
            std::vector<zmq_poller_event_t> events;
            while (true) {
                const auto due = std::chrono::duration_cast<std::chrono::milliseconds>(next_sweep - Clock::now());
                events.resize(dealers_ + 2);
                const int ready = zmq_poller_wait_all(poller_, events.data(), static_cast<int>(events.size()),
                                                      std::clamp<long>(static_cast<long>(due.count()), 0, 100));
                if (ready < 0 && zmq_errno() != EAGAIN && zmq_errno() != EINTR)
                    throw ZmqError("zmq_poller_wait_all", zmq_errno());
                bool clients = false;
                for (int i = 0; i < ready; ++i) {  // the replies first: the clients' messages may close DEALERs
                    if (events[i].fd == wake_read_ && !events[i].socket) {
                        running_ = false;
                        return;
                    }
                    if (events[i].socket == server_)
                        clients = true;
                    else if (events[i].socket)
                        guarded([&] { from_broker(events[i].socket); });
                }
                if (clients)
                    guarded([&] { from_clients(); });
                if (Clock::now() >= next_sweep) {
                    guarded([&] { sweep(Clock::now()); });
                    next_sweep = Clock::now() + options_.heartbeat_interval;
                }
            }
        } catch (const std::exception &error) {
            fail(error.what());
        } catch (...) {
            fail("unknown error");
        }
    }

    void fail(const std::string &why)
    {
        std::lock_guard<std::mutex> lock(error_mutex_);
        failure_ = why;
        running_ = false;
    }

    // A libzmq failure stops the bridge; any other error drops the message being handled, counted.
    template <class F>
    void guarded(F &&job)
    {
        try {
            job();
        } catch (const ZmqError &) {
            throw;
        } catch (const std::exception &) {
            ++internal_errors_;
        }
    }

    void from_clients()
    {
        for (int n = 0; n < 256; ++n) {  // then the broker's replies get their turn
            zmq_msg_t message;
            zmq_msg_init(&message);
            if (zmq_msg_recv(&message, server_, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&message);
                return;
            }
            const std::uint32_t client = zmq_msg_routing_id(&message);
            std::optional<Frames> frames;
            try {
                frames = protocol::decode(
                    std::string_view(static_cast<const char *>(zmq_msg_data(&message)), zmq_msg_size(&message)),
                    options_.max_frames);
            } catch (const protocol::DecodeError &) {
            }
            zmq_msg_close(&message);
            heard_[client] = Clock::now();
            auto parsed = frames ? bridge::parse_client(std::move(*frames)) : std::nullopt;
            if (!parsed) {
                ++dropped_;
                continue;
            }
            guarded([&] { from_client(client, std::move(*parsed)); });
        }
    }

    void from_client(std::uint32_t client, bridge::ClientMessage &&message)
    {
        if (message.command == bridge::heartbeat) {
            Frames unknown;
            for (auto &id : message.body)
                if (!by_request_.count({client, id}) && !is_queued(client, id))
                    unknown.push_back(std::move(id));
            reply(client, bridge::heartbeat_answer(instance_, unknown));
        } else if (message.command == bridge::cancel) {
            auto found = by_request_.find({client, message.request_id});
            if (found != by_request_.end()) {
                void *dealer = found->second;
                untrack(in_flight_.find(dealer));
                close_dealer(dealer);
                pump();
            } else if (auto queue = queues_.find(client); queue != queues_.end()) {
                if (auto waiting = queue->second.index.find(message.request_id); waiting != queue->second.index.end())
                    unqueue(queue, waiting->second);
            }
        } else if (message.long_description) {
            refuse(client, message.request_id, protocol::bad_request,
                   "description of " + std::to_string(message.description.size()) + " bytes is outside 0 to " +
                       std::to_string(bridge::max_description) + " bytes");
        } else {
            forward(client, std::move(message));
        }
    }

    bool is_queued(std::uint32_t client, const std::string &request_id) const
    {
        auto queue = queues_.find(client);
        return queue != queues_.end() && queue->second.index.count(request_id);
    }

    std::size_t in_flight_of(std::uint32_t client) const
    {
        auto held = per_client_.find(client);
        return held == per_client_.end() ? 0 : held->second;
    }

    bool has_place(std::uint32_t client) const
    {
        auto held = per_client_.find(client);
        return in_flight_.size() < options_.max_in_flight && (held == per_client_.end() || held->second < max_per_client_);
    }

    void forward(std::uint32_t client, bridge::ClientMessage &&message)
    {
        if (by_request_.count({client, message.request_id}) || is_queued(client, message.request_id))
            return;  // a retry of a request in flight, or waiting
        auto queue = queues_.find(client);
        if (queue == queues_.end() && has_place(client)) {
            start(client, std::move(message));
            return;
        }
        std::size_t charge = bridge::queued_overhead + message.request_id.size() + message.description.size();
        for (const auto &frame : message.body)
            charge += frame.size();
        const std::size_t held = queue == queues_.end() ? 0 : queue->second.bytes;
        if (held + charge > options_.connection_queue_bytes || queued_all_ + charge > options_.total_queue_bytes) {
            refuse(client, message.request_id, 429,
                   "this connection has " + std::to_string(in_flight_of(client)) + " requests in flight and " +
                       std::to_string(held) + " bytes of requests waiting, and the bridge " +
                       std::to_string(queued_all_) + " (its bounds: connection_queue_bytes, and the total)");
            return;
        }
        if (queue == queues_.end()) {
            queue = queues_.emplace(client, Queue{}).first;
            turns_.push_back(client);
        }
        const std::string id = message.request_id;
        queue->second.waiting.push_back(Waiting{std::move(message), charge});
        queue->second.index[id] = std::prev(queue->second.waiting.end());
        queue->second.bytes += charge;
        queued_all_ += charge;
        ++queued_count_;
    }

    struct Waiting {
        bridge::ClientMessage message;
        std::size_t charge;
    };
    struct Queue {
        std::list<Waiting> waiting;  // in order
        std::unordered_map<std::string, std::list<Waiting>::iterator> index;  // by request id
        std::size_t bytes = 0;
    };

    // The waiting request at `entry` leaves its queue (the queue goes when empty); returns its message.
    bridge::ClientMessage unqueue(std::unordered_map<std::uint32_t, Queue>::iterator queue,
                                  std::list<Waiting>::iterator entry)
    {
        bridge::ClientMessage message = std::move(entry->message);
        queue->second.index.erase(message.request_id);
        queue->second.bytes -= entry->charge;
        queued_all_ -= entry->charge;
        --queued_count_;
        queue->second.waiting.erase(entry);
        if (queue->second.waiting.empty())
            drop_queue(queue->first);
        return message;
    }

    void drop_queue(std::uint32_t client)
    {
        auto queue = queues_.find(client);
        if (queue == queues_.end())
            return;
        for (const auto &entry : queue->second.waiting) {
            queued_all_ -= entry.charge;
            --queued_count_;
        }
        queues_.erase(queue);
        turns_.erase(std::remove(turns_.begin(), turns_.end(), client), turns_.end());
    }

    // Give the places in flight that freed to the waiting requests, one connection after the other.
    void pump()
    {
        std::size_t passed = 0;  // connections looked at since one last got a place
        while (!turns_.empty() && in_flight_.size() < options_.max_in_flight && passed < turns_.size()) {
            const std::uint32_t client = turns_.front();
            turns_.pop_front();
            turns_.push_back(client);
            if (!has_place(client)) {
                ++passed;
                continue;
            }
            passed = 0;
            auto queue = queues_.find(client);
            start(client, unqueue(queue, queue->second.waiting.begin()));
        }
    }

    // Send the request upstream on a DEALER of its own (429 if none can be opened).
    void start(std::uint32_t client, bridge::ClientMessage &&message)
    {
        void *dealer = nullptr;
        if (!idle_.empty()) {
            dealer = idle_.back().first;
            idle_.pop_back();
        } else {
            try {
                dealer = new_dealer();
            } catch (const ZmqError &error) {  // out of sockets or files: this request is refused, the bridge serves on
                refuse(client, message.request_id, 429,
                       std::string("the bridge could not open a connection to the broker: ") + error.what());
                return;
            }
        }
        if (!send_mdp_request(dealer, message.description, message.body)) {
            close_dealer(dealer);
            refuse(client, message.request_id, 429, "the bridge could not send the request to the broker");
            return;
        }
        by_request_[{client, message.request_id}] = dealer;
        in_flight_[dealer] = InFlight{client, std::move(message.request_id), std::move(message.description)};
        ++per_client_[client];
        ++forwarded_;
    }

    // The request in flight at `entry`, no longer in flight (its client's count too); the next entry.
    std::unordered_map<void *, InFlight>::iterator untrack(std::unordered_map<void *, InFlight>::iterator entry)
    {
        const std::uint32_t client = entry->second.client;
        by_request_.erase({client, entry->second.request_id});
        if (auto held = per_client_.find(client); held != per_client_.end() && --held->second == 0)
            per_client_.erase(held);
        return in_flight_.erase(entry);
    }

    // "", "MDPC01", service, body...: false if the DEALER does not take it (once its first frame is taken, libzmq
    // takes the whole message; a fresh DEALER queues it until the broker is connected).
    static bool send_mdp_request(void *dealer, std::string_view service, const Frames &body)
    {
        const std::string_view head[] = {"", bridge::mdp_client, service};
        if (zmq_send(dealer, head[0].data(), head[0].size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            return false;
        zmq_send(dealer, head[1].data(), head[1].size(), ZMQ_SNDMORE);
        zmq_send(dealer, head[2].data(), head[2].size(), body.empty() ? 0 : ZMQ_SNDMORE);
        for (std::size_t i = 0; i < body.size(); ++i)
            zmq_send(dealer, body[i].data(), body[i].size(), i + 1 < body.size() ? ZMQ_SNDMORE : 0);
        return true;
    }

    void from_broker(void *dealer)
    {
        Frames frames;
        int more = 1;
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, dealer, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&part);
                if (frames.empty())
                    return;
                break;
            }
            frames.emplace_back(static_cast<const char *>(zmq_msg_data(&part)), zmq_msg_size(&part));
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        auto found = in_flight_.find(dealer);
        if (found == in_flight_.end())
            return;  // a reply for no request in flight (its DEALER is idle): dropped
        InFlight request = found->second;
        untrack(found);
        idle_.emplace_back(dealer, Clock::now());
        pump();
        if (auto body = bridge::parse_mdp_reply(std::move(frames), request.description))
            reply(request.client, bridge::final_reply(request.request_id, protocol::ok, *body));
        else
            reply(request.client, bridge::final_reply(request.request_id, 502,
                                                      {"malformed reply from the upstream broker"}));
    }

    void refuse(std::uint32_t client, std::string_view request_id, int status, const std::string &reason)
    {
        if (status == 429) {
            ++refused_in_flight_;
            reply(client, bridge::final_reply(request_id, status, {reason, std::string(bridge::retry_after)}));
            return;
        }
        reply(client, bridge::final_reply(request_id, status, {reason}));
    }

    // Send a packed message to a client without blocking; one that cannot take it now loses it (it resends).
    void reply(std::uint32_t client, const std::string &packed)
    {
        zmq_msg_t message;
        zmq_msg_init_size(&message, packed.size());
        std::copy(packed.begin(), packed.end(), static_cast<char *>(zmq_msg_data(&message)));
        if (zmq_msg_set_routing_id(&message, client) != 0 || zmq_msg_send(&message, server_, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&message);
    }

    void sweep(Clock::time_point now)
    {
        const auto expiry = options_.heartbeat_interval * options_.liveness;
        for (auto heard = heard_.begin(); heard != heard_.end();) {
            if (now - heard->second <= expiry) {
                ++heard;
                continue;
            }
            const std::uint32_t client = heard->first;
            heard = heard_.erase(heard);
            for (auto entry = in_flight_.begin(); entry != in_flight_.end();) {
                if (entry->second.client != client) {
                    ++entry;
                    continue;
                }
                void *dealer = entry->first;
                entry = untrack(entry);
                close_dealer(dealer);
            }
            drop_queue(client);
        }
        pump();
        auto keep = std::remove_if(idle_.begin(), idle_.end(), [&](const auto &entry) {
            if (now - entry.second <= options_.idle_timeout)
                return false;
            close_dealer(entry.first);
            return true;
        });
        idle_.erase(keep, idle_.end());
    }

    BridgeOptions options_;
    std::size_t max_per_client_;  // of options_.max_in_flight, one client connection's share (at least 1)
    std::string broker_;
    detail::Context context_;
    std::string instance_;
    std::vector<std::string> endpoints_;
    void *server_ = nullptr;
    void *poller_ = nullptr;
    int wake_read_ = -1, wake_write_ = -1;
    std::unordered_map<void *, InFlight> in_flight_;  // the bridge's thread only, from here on
    std::map<std::pair<std::uint32_t, std::string>, void *> by_request_;
    std::unordered_map<std::uint32_t, std::size_t> per_client_;  // requests in flight per client connection
    std::vector<std::pair<void *, Clock::time_point>> idle_;
    std::unordered_map<std::uint32_t, Queue> queues_;  // each connection's waiting requests
    std::deque<std::uint32_t> turns_;  // connections with waiting requests, in the order places go to them
    std::size_t queued_all_ = 0;       // bytes charged to all the queues
    std::atomic<std::size_t> queued_count_{0};
    std::unordered_map<std::uint32_t, Clock::time_point> heard_;
    std::atomic<bool> running_{false};
    std::atomic<std::uint64_t> forwarded_{0}, refused_in_flight_{0}, dropped_{0}, internal_errors_{0};
    std::atomic<std::size_t> dealers_{0};
    mutable std::mutex error_mutex_;  // guards failure_
    std::string failure_;
    std::mutex stop_mutex_;  // serialises stop() callers
    std::thread thread_;     // last: started once everything above exists
};

}  // namespace generaldomo
