// tests/cpp/answers.hpp: how the C++ test programs print what a request got.
#pragma once

#include <generaldomo/client.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

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

// T threads share `client`, each making N blocking requests "t<thread>-<n>" (sent as the frames `body` makes of
// it); returns "<thread> <n> <answer>" per request, thread by thread, in order.
inline std::vector<std::string> ask_from_threads(generaldomo::Client &client, const std::string &service, int threads,
                                                 long requests, std::chrono::milliseconds timeout,
                                                 const std::function<generaldomo::Frames(const std::string &)> &body)
{
    std::vector<std::vector<std::string>> lines(threads);
    std::vector<std::thread> running;
    for (int t = 0; t < threads; ++t)
        running.emplace_back([&, t] {
            for (long n = 0; n < requests; ++n) {
                const std::string payload = "t" + std::to_string(t) + "-" + std::to_string(n);
                lines[t].push_back(std::to_string(t) + " " + std::to_string(n) + " " +
                                   answer([&] { return client.request(service, body(payload), timeout); }));
            }
        });
    for (auto &thread : running)
        thread.join();
    std::vector<std::string> all;
    for (auto &mine : lines)
        all.insert(all.end(), mine.begin(), mine.end());
    return all;
}
