# find_package(generaldomo CONFIG REQUIRED) gives the target generaldomo::generaldomo: the header-only C++17
# client and worker (generaldomo/generaldomo.hpp), with libzmq (its draft API) and threads. libzmq is found by
# pkg-config: the project's draft build when its prefix is on CMAKE_PREFIX_PATH, as
#   cmake -DCMAKE_PREFIX_PATH="$(python -m generaldomo.cpp --cmake-prefix-path)" ...
# sets it, else a libzmq installed with --enable-drafts.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(PkgConfig)
if(NOT TARGET generaldomo::generaldomo)
    pkg_check_modules(GENERALDOMO_LIBZMQ REQUIRED IMPORTED_TARGET libzmq>=4.3.4)
    get_filename_component(_generaldomo_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
    add_library(generaldomo::generaldomo INTERFACE IMPORTED)
    set_target_properties(generaldomo::generaldomo PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${_generaldomo_prefix}/include"
        INTERFACE_COMPILE_FEATURES cxx_std_17
        INTERFACE_LINK_LIBRARIES "PkgConfig::GENERALDOMO_LIBZMQ;Threads::Threads")
    unset(_generaldomo_prefix)
endif()
set(generaldomo_FOUND TRUE)
