// tests/cpp/answers.hpp: how the C++ test programs print what a request got.
#pragma once

#include <generaldomo/client.hpp>

#include <functional>
#include <string>

// A reply's frames joined by '|'.
inline std::string join(const generaldomo::Frames &frames)
{
    std::string out;
    for (std::size_t i = 0; i < frames.size(); ++i)
        out += (i ? "|" : "") + frames[i];
    return out;
}

// The text of an answer: its frames, or "error <status> <reason>", "handshake <kind> <cause>" or "timeout".
inline std::string answer(const std::function<generaldomo::Reply()> &get)
{
    try {
        return join(get().frames);
    } catch (const generaldomo::RequestFailed &error) {
        return "error " + std::to_string(error.status()) + " " + error.reason();
    } catch (const generaldomo::HandshakeFailed &error) {
        return "handshake " + error.kind() + " " + error.what();
    } catch (const generaldomo::Timeout &) {
        return "timeout";
    }
}
