// generaldomo/protocol.hpp: the SERVER-transport framing (CZMQ's zmsg_encode layout) and the GDP client and
// worker messages, byte for byte as docs/protocol.rst gives them. No sockets, no threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace generaldomo {

using Frames = std::vector<std::string>;  // a message: frames of bytes (empty frames are legal)

namespace protocol {

inline constexpr std::string_view client_header = "GDPC01";
inline constexpr std::string_view worker_header = "GDPW01";

// GDP client command bytes (0x06: a REQUEST with a fields frame after the description).
inline constexpr char client_request = 0x01, client_partial = 0x02, client_final = 0x03, client_heartbeat = 0x04,
                      client_request_fields = 0x06;
// GDP worker command bytes (results travel in READY: there is no FINAL). 0x07 and 0x08 go to workers whose
// READY said they understand them (peer info "features": "fields", "cancel"); RESUME and HANDOVER are the
// hand-over (docs/protocol.rst, "Hand-over").
inline constexpr char worker_ready = 0x01, worker_request = 0x02, worker_partial = 0x03, worker_heartbeat = 0x05,
                      worker_disconnect = 0x06, worker_request_fields = 0x07, worker_cancel = 0x08,
                      worker_resume = 0x09, worker_handover = 0x0A;
inline constexpr std::size_t nonce_bytes = 16;  // a task is named in a heartbeat's acknowledgements by this prefix

// Status codes of FINAL replies (429 from a worker: "slow down", see docs/protocol.rst).
inline constexpr int ok = 200, bad_request = 400, too_large = 413, too_many = 429, worker_error = 500,
                     unavailable = 503, expired = 504;
// The second result frame of a worker's 503 that asks the broker to retry the task ("Retries").
inline constexpr std::string_view retry_mark = "retry";

// Request fields: entries of a tag byte, a length byte and the value (docs/protocol.rst, "Request fields").
inline constexpr unsigned char field_deadline = 0x01, field_priority = 0x02, field_tenant = 0x03, field_flags = 0x04,
                                field_not_before = 0x05;
// The request's W3C trace context (docs/protocol.rst, "Request fields"): a traceparent, and a tracestate beside it.
inline constexpr unsigned char field_traceparent = 0x10, field_tracestate = 0x11;
inline constexpr std::size_t max_fields = 256, max_tracestate = 255, long_trace_member = 128;
// Request flags (the flags field's bits): flag_known_service asks for 404 at once for a service with no worker now
// and none recently.
inline constexpr unsigned char flag_known_service = 0x02;
inline constexpr int min_priority = -5, max_priority = 5;
inline constexpr std::size_t max_tenant = 64;

class DecodeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------------------------------------ framing

// Append one frame: its length (one byte below 255, else 0xFF and 4 bytes big-endian), then its bytes.
inline void append_frame(std::string &out, std::string_view frame)
{
    const std::size_t size = frame.size();
    if (size < 0xFF) {
        out.push_back(static_cast<char>(size));
    } else {
        if (size > 0xFFFFFFFFu)
            throw std::length_error("frame too large to encode");
        out.push_back(static_cast<char>(0xFF));
        for (int shift = 24; shift >= 0; shift -= 8)
            out.push_back(static_cast<char>((size >> shift) & 0xFF));
    }
    out.append(frame);
}

inline std::string encode(const Frames &frames)
{
    std::string out;
    for (const auto &frame : frames)
        append_frame(out, frame);
    return out;
}

// Unpack bytes made by encode(); throws DecodeError if a length runs past the end, or (for peers that may be
// hostile) as soon as there are more than max_frames frames.
inline Frames decode(std::string_view data, std::size_t max_frames = static_cast<std::size_t>(-1))
{
    Frames frames;
    std::size_t pos = 0;
    const std::size_t end = data.size();
    while (pos < end) {
        if (frames.size() == max_frames)
            throw DecodeError("more than " + std::to_string(max_frames) + " frames");
        std::size_t size = static_cast<unsigned char>(data[pos++]);
        if (size == 0xFF) {
            if (end - pos < 4)
                throw DecodeError("truncated length prefix");
            size = 0;
            for (int i = 0; i < 4; ++i)
                size = (size << 8) | static_cast<unsigned char>(data[pos++]);
        }
        if (end - pos < size)
            throw DecodeError("frame runs past the end of the message");
        frames.emplace_back(data.substr(pos, size));
        pos += size;
    }
    return frames;
}

// ------------------------------------------------------------------------------------------ request fields

// Whether text is a W3C traceparent of version 00: "00-" 32 hex "-" 16 hex "-" 2 hex, lowercase, ids not all zero.
inline bool valid_traceparent(std::string_view text)
{
    if (text.size() != 55 || text.substr(0, 3) != "00-" || text[35] != '-' || text[52] != '-')
        return false;
    bool trace_zero = true, parent_zero = true;
    for (std::size_t i = 3; i < 55; ++i) {
        if (i == 35 || i == 52)
            continue;
        const char c = text[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
        if (c != '0' && i < 35)
            trace_zero = false;
        if (c != '0' && i > 35 && i < 52)
            parent_zero = false;
    }
    return !trace_zero && !parent_zero;
}

// A tracestate trimmed to at most room bytes: members longer than 128 characters go first, then members from the
// end (the W3C rule); empty when none fits.
inline std::string fit_tracestate(std::string_view tracestate, std::size_t room)
{
    room = std::min(room, max_tracestate);
    if (tracestate.size() <= room)
        return std::string(tracestate);
    std::vector<std::string> members;
    std::size_t at = 0;
    while (at <= tracestate.size()) {
        std::size_t comma = tracestate.find(',', at);
        if (comma == std::string_view::npos)
            comma = tracestate.size();
        std::string_view member = tracestate.substr(at, comma - at);
        while (!member.empty() && (member.front() == ' ' || member.front() == '\t'))
            member.remove_prefix(1);
        while (!member.empty() && (member.back() == ' ' || member.back() == '\t'))
            member.remove_suffix(1);
        if (!member.empty())
            members.emplace_back(member);
        at = comma + 1;
    }
    auto joined = [&members] {
        std::string out;
        for (const auto &member : members)
            out += (out.empty() ? "" : ",") + member;
        return out;
    };
    std::string out = joined();
    while (!members.empty() && out.size() > room) {
        auto long_member = std::find_if(members.begin(), members.end(),
                                        [](const std::string &member) { return member.size() > long_trace_member; });
        members.erase(long_member != members.end() ? long_member : members.end() - 1);
        out = joined();
    }
    return out;
}

// The fields frame: a deadline (milliseconds left, clamped to 0..2^32-1), a tenant (1 to 64 bytes; empty: none),
// a priority (-5..5; 0 is left out), flags (flag_* bits; 0 is left out), a W3C trace context (a traceparent,
// empty: none; its tracestate trimmed to the room the others leave) and a not-before delay (milliseconds before
// which the task is not dispatched, clamped to 2^32-1; 0 or less is left out). Throws std::invalid_argument on a
// tenant or priority out of range, or a malformed traceparent.
inline std::string request_fields(std::optional<std::chrono::milliseconds> deadline, std::string_view tenant = {},
                                  int priority = 0, unsigned char flags = 0, std::string_view traceparent = {},
                                  std::string_view tracestate = {},
                                  std::optional<std::chrono::milliseconds> not_before = std::nullopt)
{
    std::string out;
    auto milliseconds = [&out](unsigned char tag, long long count) {
        const long long ms = std::max<long long>(0, std::min<long long>(count, 0xFFFFFFFFll));
        out.push_back(static_cast<char>(tag));
        out.push_back(4);
        for (int shift = 24; shift >= 0; shift -= 8)
            out.push_back(static_cast<char>((ms >> shift) & 0xFF));
    };
    if (deadline)
        milliseconds(field_deadline, deadline->count());
    if (not_before && not_before->count() > 0)
        milliseconds(field_not_before, not_before->count());
    if (flags != 0) {
        out.push_back(static_cast<char>(field_flags));
        out.push_back(1);
        out.push_back(static_cast<char>(flags));
    }
    if (priority != 0) {
        if (priority < min_priority || priority > max_priority)
            throw std::invalid_argument("a priority is -5 to 5");
        out.push_back(static_cast<char>(field_priority));
        out.push_back(1);
        out.push_back(static_cast<char>(static_cast<signed char>(priority)));
    }
    if (!tenant.empty()) {
        if (tenant.size() > max_tenant)
            throw std::invalid_argument("a tenant is at most 64 bytes");
        for (unsigned char c : tenant)
            if (c < 0x20 || c == 0x7F)
                throw std::invalid_argument("a tenant is printable text");
        out.push_back(static_cast<char>(field_tenant));
        out.push_back(static_cast<char>(tenant.size()));
        out.append(tenant);
    }
    if (!traceparent.empty()) {  // last: its tracestate takes the room the others left
        if (!valid_traceparent(traceparent))
            throw std::invalid_argument("a traceparent is 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zero");
        for (unsigned char c : tracestate)
            if (c < 0x20 || c > 0x7E)
                throw std::invalid_argument("a tracestate is printable ASCII");
        out.push_back(static_cast<char>(field_traceparent));
        out.push_back(static_cast<char>(traceparent.size()));
        out.append(traceparent);
        const std::size_t room = max_fields - out.size();
        const std::string state = room > 2 ? fit_tracestate(tracestate, room - 2) : std::string();
        if (!state.empty()) {
            out.push_back(static_cast<char>(field_tracestate));
            out.push_back(static_cast<char>(state.size()));
            out.append(state);
        }
    }
    return out;
}

// The deadline a fields frame carries (milliseconds left), nullopt if none or if the frame is malformed.
inline std::optional<std::chrono::milliseconds> parse_deadline(std::string_view fields)
{
    std::size_t at = 0;
    while (at + 2 <= fields.size()) {
        const auto tag = static_cast<unsigned char>(fields[at]);
        const std::size_t size = static_cast<unsigned char>(fields[at + 1]);
        if (fields.size() - at - 2 < size)
            return std::nullopt;
        if (tag == field_deadline && size == 4) {
            std::uint32_t ms = 0;
            for (std::size_t i = 0; i < 4; ++i)
                ms = (ms << 8) | static_cast<unsigned char>(fields[at + 2 + i]);
            return std::chrono::milliseconds(ms);
        }
        at += 2 + size;
    }
    return std::nullopt;
}

// ------------------------------------------------------------------------------------------ client side

// REQUEST: GDPC01, 0x01, request id, request description, payload...; with fields (request_fields()):
// GDPC01, 0x06, request id, request description, fields, payload...  (packed)
inline std::string request(std::string_view request_id, std::string_view description, const Frames &body,
                           std::string_view fields = {})
{
    std::string out;
    std::size_t size = 64 + request_id.size() + description.size() + fields.size();
    for (const auto &frame : body)
        size += 5 + frame.size();
    out.reserve(size);  // one allocation, no copy as it grows: a request may be large
    append_frame(out, client_header);
    append_frame(out, std::string_view(fields.empty() ? &client_request : &client_request_fields, 1));
    append_frame(out, request_id);
    append_frame(out, description);
    if (!fields.empty())
        append_frame(out, fields);
    for (const auto &frame : body)
        append_frame(out, frame);
    return out;
}

// HEARTBEAT: GDPC01, 0x04  (packed)
inline std::string client_heartbeat_message()
{
    std::string out;
    append_frame(out, client_header);
    append_frame(out, std::string_view(&client_heartbeat, 1));
    return out;
}

// A broker reply to a client: PARTIAL (final false, status 0) or FINAL.
struct ClientReply {
    std::string request_id;
    bool final = false;
    int status = 0;      // FINAL: the status digits as a number; -1 if they are not digits
    std::string timing;  // FINAL: empty or 16 bytes
    Frames body;
};

inline int parse_status(std::string_view digits)
{
    if (digits.empty() || digits.size() > 6)
        return -1;
    int value = 0;
    for (char c : digits) {
        if (c < '0' || c > '9')
            return -1;
        value = value * 10 + (c - '0');
    }
    return value;
}

// PARTIAL: GDPC01, 0x02, request id, partial payload...; FINAL: GDPC01, 0x03, request id, status, timing,
// payload...  Anything else: nullopt.
inline std::optional<ClientReply> parse_client_reply(Frames &&frames)
{
    if (frames.size() < 3 || frames[0] != client_header || frames[1].size() != 1)
        return std::nullopt;
    ClientReply reply;
    const char command = frames[1][0];
    if (command == client_final && frames.size() >= 5) {
        reply.final = true;
        reply.status = parse_status(frames[3]);
        reply.timing = std::move(frames[4]);
        reply.body.assign(std::make_move_iterator(frames.begin() + 5), std::make_move_iterator(frames.end()));
    } else if (command == client_partial) {
        reply.body.assign(std::make_move_iterator(frames.begin() + 3), std::make_move_iterator(frames.end()));
    } else {
        return std::nullopt;
    }
    reply.request_id = std::move(frames[2]);
    return reply;
}

// The broker's answer to a client HEARTBEAT (GDPC01, 0x04, broker instance): the instance, else nullopt.
inline std::optional<std::string> parse_broker_instance(const Frames &frames)
{
    if (frames.size() == 3 && frames[0] == client_header && frames[1].size() == 1 && frames[1][0] == client_heartbeat)
        return frames[2];
    return std::nullopt;
}

// A timing frame: (seconds queued, seconds served), two big-endian IEEE 754 doubles; nullopt if empty.
inline std::optional<std::pair<double, double>> parse_timing(std::string_view frame)
{
    if (frame.size() != 16)
        return std::nullopt;
    auto read = [&](std::size_t at) {
        std::uint64_t bits = 0;
        for (std::size_t i = 0; i < 8; ++i)
            bits = (bits << 8) | static_cast<unsigned char>(frame[at + i]);
        double value;
        std::memcpy(&value, &bits, sizeof value);
        return value;
    };
    return std::make_pair(read(0), read(8));
}

// A 429's retry-after frame: seconds as decimal ASCII (at most 16 bytes, digits and a point, finite, not
// negative); nullopt if it is not one.
inline std::optional<double> parse_retry_after(std::string_view frame)
{
    if (frame.empty() || frame.size() > 16)
        return std::nullopt;
    int points = 0;
    for (char c : frame) {
        if (c == '.')
            ++points;
        else if (c < '0' || c > '9')
            return std::nullopt;
    }
    if (points > 1 || frame == ".")
        return std::nullopt;
    return std::stod(std::string(frame));
}

// ------------------------------------------------------------------------------------------ worker side

inline std::string worker_message(char command, std::initializer_list<std::string_view> args = {},
                                  const Frames &more = {})
{
    std::string out;
    append_frame(out, worker_header);
    append_frame(out, std::string_view(&command, 1));
    for (auto arg : args)
        append_frame(out, arg);
    for (const auto &frame : more)
        append_frame(out, frame);
    return out;
}

// READY: GDPW01, 0x01, service description
inline std::string ready(std::string_view description) { return worker_message(worker_ready, {description}); }

// READY with peer info: GDPW01, 0x01, service description, {"features":["cancel","fields"],"pid":N,"id":"..."}
// (id: the worker's name for itself across its reconnects, printable, at most 64 characters; empty: none)
inline std::string peer_info(long pid, std::string_view id = {})
{
    std::string info = "{\"features\":[\"cancel\",\"fields\"],\"pid\":" + std::to_string(pid);
    if (!id.empty())
        info.append(",\"id\":\"").append(id).append("\"");
    return info + "}";
}

inline std::string ready_with_info(std::string_view description, long pid, std::string_view id = {})
{
    return worker_message(worker_ready, {description, peer_info(pid, id)});
}

// READY + result: GDPW01, 0x01, service description, task id, status, result...
inline std::string ready(std::string_view description, std::string_view task_id, int status, const Frames &result)
{
    const std::string digits = std::to_string(status);
    return worker_message(worker_ready, {description, task_id, digits}, result);
}

// RESUME: GDPW01, 0x09, service description, task id (registering while that task runs), with peer info as
// READY's (pid 0: without it)
inline std::string resume(std::string_view description, std::string_view task_id, long pid, std::string_view id = {})
{
    if (pid == 0)
        return worker_message(worker_resume, {description, task_id});
    return worker_message(worker_resume, {description, task_id, peer_info(pid, id)});
}

// HANDOVER: GDPW01, 0x0A, task id, status, result... (a result of an earlier registration)
inline std::string handover(std::string_view task_id, int status, const Frames &result)
{
    const std::string digits = std::to_string(status);
    return worker_message(worker_handover, {task_id, digits}, result);
}

// PARTIAL: GDPW01, 0x03, task id, partial result...
inline std::string partial(std::string_view task_id, const Frames &body)
{
    return worker_message(worker_partial, {task_id}, body);
}

// A broker message to a worker: REQUEST (args: task id, request description, payload...; a REQUEST+FIELDS is
// given as a REQUEST with its deadline), CANCEL (args: task id), HEARTBEAT (args: a hand-over broker's instance,
// then the nonces of the results it took) or DISCONNECT; nullopt otherwise.
struct WorkerCommand {
    char command;
    Frames args;
    std::optional<std::chrono::milliseconds> deadline;  // REQUEST: the time the client still waits, if it said
};

inline std::optional<WorkerCommand> parse_worker_command(Frames &&frames)
{
    if (frames.size() < 2 || frames[0] != worker_header || frames[1].size() != 1)
        return std::nullopt;
    const char command = frames[1][0];
    if (command == worker_request_fields) {
        if (frames.size() < 5)
            return std::nullopt;
        auto deadline = parse_deadline(frames[4]);
        frames.erase(frames.begin() + 4);
        WorkerCommand request{worker_request, Frames(std::make_move_iterator(frames.begin() + 2),
                                                     std::make_move_iterator(frames.end())), deadline};
        return request;
    }
    if (command != worker_request && command != worker_heartbeat && command != worker_disconnect &&
        command != worker_cancel)
        return std::nullopt;
    if ((command == worker_request && frames.size() < 4) || (command == worker_cancel && frames.size() != 3))
        return std::nullopt;
    return WorkerCommand{command,
                         Frames(std::make_move_iterator(frames.begin() + 2), std::make_move_iterator(frames.end())),
                         std::nullopt};
}

}  // namespace protocol
}  // namespace generaldomo
