// tests/cpp/gd_protocol.cpp: checks protocol.hpp against the byte layouts of docs/protocol.rst. Prints one
// line per failed check and "protocol: N checks, M failed"; exits 1 if any failed.
#include <generaldomo/protocol.hpp>

#include <cstdio>
#include <string>

namespace {

int checks = 0, failures = 0;

void check(bool ok, const char *what)
{
    ++checks;
    if (!ok) {
        ++failures;
        std::printf("FAILED %s\n", what);
    }
}

template <typename F> bool throws_decode_error(F &&call)
{
    try {
        call();
    } catch (const generaldomo::protocol::DecodeError &) {
        return true;
    }
    return false;
}

}  // namespace

int main()
{
    namespace p = generaldomo::protocol;
    using generaldomo::Frames;
    using namespace std::string_literals;

    check(p::encode({"GDPC01", ""}) == "\x06GDPC01\x00"s, "the documented example packs to 06 47 44 50 43 30 31 00");
    const std::string long_frame(300, 'z');
    const std::string packed = p::encode({long_frame, std::string(254, 'a'), std::string(255, 'b')});
    check(packed.substr(0, 5) == "\xff\x00\x00\x01\x2c"s, "a 300-byte frame has a 0xFF and 4-byte big-endian length");
    check(static_cast<unsigned char>(packed[305]) == 254, "a 254-byte frame has a one-byte length");
    check(packed.substr(560, 5) == "\xff\x00\x00\x00\xff"s, "a 255-byte frame has the long length");
    check(p::decode(packed) == Frames{long_frame, std::string(254, 'a'), std::string(255, 'b')}, "decode undoes encode");
    check(p::decode("").empty(), "no bytes, no frames");
    check(throws_decode_error([] { p::decode("\x05"s "abc"); }), "a frame running past the end is an error");
    check(throws_decode_error([] { p::decode("\xff\x00\x00"s); }), "a truncated long length is an error");

    check(p::decode(p::request("ID", "echo", {"a", ""})) == Frames{"GDPC01", "\x01", "ID", "echo", "a", ""},
          "REQUEST: GDPC01, 0x01, id, description, payload...");
    check(p::decode(p::client_heartbeat_message()) == Frames{"GDPC01", "\x04"}, "client HEARTBEAT: GDPC01, 0x04");
    check(p::parse_broker_instance({"GDPC01", "\x04", "inst"}) == std::optional<std::string>("inst"),
          "the broker's HEARTBEAT names its instance");
    check(!p::parse_broker_instance({"GDPC01", "\x04"}), "a HEARTBEAT without instance is not an answer");

    const std::string timing = "\x3f\xd0\0\0\0\0\0\0\x3f\xe0\0\0\0\0\0\0"s;  // 0.25 and 0.5, big-endian
    auto final = p::parse_client_reply({"GDPC01", "\x03", "ID", "200", timing, "r", ""});
    check(final && final->final && final->status == 200 && final->request_id == "ID" &&
              final->body == Frames{"r", ""},
          "FINAL: GDPC01, 0x03, id, status, timing, payload...");
    check(p::parse_timing(timing) == std::make_optional(std::make_pair(0.25, 0.5)), "timing: two big-endian doubles");
    check(!p::parse_timing(""), "an empty timing frame carries none");
    auto partial = p::parse_client_reply({"GDPC01", "\x02", "ID", "part"});
    check(partial && !partial->final && partial->body == Frames{"part"}, "PARTIAL: GDPC01, 0x02, id, payload...");
    auto failed = p::parse_client_reply({"GDPC01", "\x03", "ID", "abc", ""});
    check(failed && failed->status == -1, "a status that is not digits reads as -1");
    check(!p::parse_client_reply({"GDPC01", "\x03", "ID", "200"}), "a FINAL without timing frame is not a reply");
    check(!p::parse_client_reply({"MDPC02", "\x03", "ID", "200", ""}), "another header is not a GDP reply");

    check(p::decode(p::ready("svc")) == Frames{"GDPW01", "\x01", "svc"}, "READY: GDPW01, 0x01, description");
    check(p::decode(p::ready("svc", "T", 500, {"oops"})) == Frames{"GDPW01", "\x01", "svc", "T", "500", "oops"},
          "READY + result: GDPW01, 0x01, description, task id, status, result...");
    check(p::decode(p::partial("T", {"x"})) == Frames{"GDPW01", "\x03", "T", "x"}, "PARTIAL: GDPW01, 0x03, task id...");
    check(p::decode(p::worker_message(p::worker_heartbeat)) == Frames{"GDPW01", "\x05"}, "HEARTBEAT: GDPW01, 0x05");
    check(p::decode(p::worker_message(p::worker_disconnect)) == Frames{"GDPW01", "\x06"}, "DISCONNECT: GDPW01, 0x06");
    auto task = p::parse_worker_command({"GDPW01", "\x02", "T", "echo", "x"});
    check(task && task->command == p::worker_request && task->args == Frames{"T", "echo", "x"},
          "REQUEST: GDPW01, 0x02, task id, description, payload...");
    check(!p::parse_worker_command({"GDPW01", "\x02", "T"}), "a REQUEST without description is refused");
    check(!p::parse_worker_command({"GDPW01", "\x01", "svc"}), "READY is not a broker command");

    std::printf("protocol: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
