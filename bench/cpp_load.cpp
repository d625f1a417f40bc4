// bench/cpp_load.cpp: the bench's C++-client load (generaldomo::Client, cpp/include), over the SERVER transport.
//
// cpp_load ENDPOINT SERVICE sync|pipelined N WINDOW PAYLOAD_BYTES
//   One warm-up request whose echo must match, then up to N requests: one at a time (sync) or WINDOW
//   outstanding (pipelined). Prints "n <done> seconds <elapsed> p50_us <p50> p99_us <p99>" (latencies in sync
//   mode only, else 0) and exits 0; exits 1 on a wrong echo or an error.
#include <generaldomo/generaldomo.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kTimeout{10000};

// The nearest-rank percentile, as generaldomo.sansio.broker.services.stats.nearest_rank: the ceil(pct/100 x n)-th
// smallest value.
double percentile(std::vector<double> values, double pct)
{
    if (values.empty())
        return 0.0;
    std::sort(values.begin(), values.end());
    const double rank = std::ceil(std::round(pct * static_cast<double>(values.size()) / 100.0 * 1e9) / 1e9);
    const auto index = static_cast<std::size_t>(std::max(rank, 1.0)) - 1;
    return values[std::min(index, values.size() - 1)];
}

double seconds_since(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc != 7) {
        std::fprintf(stderr, "usage: %s ENDPOINT SERVICE sync|pipelined N WINDOW PAYLOAD_BYTES\n", argv[0]);
        return 2;
    }
    const std::string service = argv[2], mode = argv[3];
    const long n = std::atol(argv[4]), window = std::max(1L, std::atol(argv[5]));
    const generaldomo::Frames frames{std::string(static_cast<std::size_t>(std::atol(argv[6])), 'x')};
    try {
        generaldomo::Client client(argv[1]);
        if (client.request(service, frames, kTimeout).frames != frames) {
            std::fprintf(stderr, "echo differs from the request\n");
            return 1;
        }
        std::vector<double> latencies;
        long done = 0;
        const auto start = Clock::now();
        if (mode == "sync") {
            for (; done < n; ++done) {
                const auto t0 = Clock::now();
                client.request(service, frames, kTimeout);
                latencies.push_back(seconds_since(t0) * 1e6);
            }
        } else {
            std::deque<std::future<generaldomo::Reply>> pending;
            long sent = 0;
            for (; sent < std::min(window, n); ++sent)
                pending.push_back(client.submit(service, frames));
            while (!pending.empty()) {
                if (pending.front().wait_for(kTimeout) != std::future_status::ready)
                    throw std::runtime_error("no reply in time");
                pending.front().get();
                pending.pop_front();
                ++done;
                if (sent < n) {
                    pending.push_back(client.submit(service, frames));
                    ++sent;
                }
            }
        }
        std::printf("n %ld seconds %.6f p50_us %.1f p99_us %.1f\n", done, seconds_since(start),
                    percentile(latencies, 50), percentile(latencies, 99));
    } catch (const std::exception &error) {
        std::fprintf(stderr, "cpp_load: %s\n", error.what());
        return 1;
    }
    return 0;
}
