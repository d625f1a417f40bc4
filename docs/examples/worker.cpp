#include <generaldomo/generaldomo.hpp>

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

int main(int argc, char **argv)
{
    sigset_t signals;  // blocked in every thread (the worker's threads inherit it); main waits for them
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    auto upper = [](const generaldomo::Task &task) -> generaldomo::Frames {
        if (task.payload().empty() || task.payload()[0].empty())
            throw generaldomo::Reject(400, "nothing to upper-case");  // the client gets 400 and the reason
        std::string text = task.payload()[0];
        std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
        return {text};  // the reply's frames; any other exception is a 500 with its what()
    };
    generaldomo::Worker worker(argc > 1 ? argv[1] : "tcp://127.0.0.1:5556", "upper", upper);
    std::printf("serving 'upper'\n");
    std::fflush(stdout);
    int signal = 0;
    sigwait(&signals, &signal);
    worker.stop();  // tells the broker at once: a task still running is reissued to another worker
    worker.wait();
    std::printf("stopped after %llu tasks\n", static_cast<unsigned long long>(worker.tasks_done()));
}
