// generaldomo/generaldomo.hpp: the whole C++ library in one include (Client, Worker, the GDP protocol).
#pragma once

#include "generaldomo/client.hpp"
#include "generaldomo/protocol.hpp"
#include "generaldomo/worker.hpp"
