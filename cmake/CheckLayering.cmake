cmake_minimum_required(VERSION 3.25)
# Fails when a source file includes across a layer boundary.
#   src/core    : the C++ standard library and core/ only
#   src/config  : + yaml-cpp
#   src/metrics : + prometheus-cpp, <unistd.h>, <dlfcn.h>
#   src/http    : + Boost (Beast, Asio buffers)
#   src/quota   : + hiredis, OpenSSL, spdlog, POSIX sockets; not Boost, not src/proxy
#                 (the proxy wires it with two hooks)
#   src/sim     : core, config, yaml-cpp (its scenario files) and the standard library
#   src/proxy, src/control, main : anything
# Run as: cmake -DSRC=<path to src> -P CheckLayering.cmake
set(_std_headers
  algorithm any array atomic bit bitset cassert cctype cerrno cfloat charconv chrono cinttypes
  climits cmath compare concepts cstddef cstdint cstdio cstdlib cstring ctime deque exception
  filesystem fstream format mutex shared_mutex thread condition_variable stop_token source_location
  functional initializer_list iomanip ios iosfwd iostream istream iterator limits list map
  memory memory_resource new numbers numeric optional ostream queue random ratio set span
  sstream stdexcept string string_view system_error tuple type_traits unordered_map
  unordered_set utility variant vector)

# src/core is pure: no threads, no locks, no files, no clocks, no entropy.
set(_core_denied thread mutex shared_mutex condition_variable stop_token fstream filesystem iostream
    istream ostream random)

function(levee_check layer allowed_prefixes)
  file(GLOB_RECURSE files "${SRC}/${layer}/*.hpp" "${SRC}/${layer}/*.cpp")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "[<\"]([^>\"]+)[>\"]" _m "${line}")
      set(inc "${CMAKE_MATCH_1}")
      set(ok FALSE)
      if(inc IN_LIST _std_headers)
        set(ok TRUE)
      endif()
      if(layer STREQUAL "core" AND inc IN_LIST _core_denied)
        set(ok FALSE)
      endif()
      foreach(p IN LISTS allowed_prefixes)
        string(FIND "${inc}" "${p}" pos)
        if(pos EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        message(SEND_ERROR "layering: ${f}: src/${layer} may not include <${inc}>")
      endif()
    endforeach()
  endforeach()
endfunction()

levee_check(core "core/")

# Time and randomness are arguments in core: nothing may read them.
file(GLOB_RECURSE _core_files "${SRC}/core/*.hpp" "${SRC}/core/*.cpp")
foreach(f IN LISTS _core_files)
  file(STRINGS "${f}" bad REGEX "(_clock::now|random_device|[^_a-z]rand\\(|time\\(nullptr|getenv)")
  if(bad)
    message(SEND_ERROR "layering: ${f}: src/core must not read clocks, entropy or the environment: ${bad}")
  endif()
endforeach()
levee_check(config "core/;config/;yaml-cpp/")
# metrics/process.cpp asks sysconf() for the clock tick and page size, and
# the dynamic linker which allocator the process runs with.
levee_check(metrics "core/;metrics/;prometheus/;unistd.h;dlfcn.h")
levee_check(http "core/;http/;boost/")
levee_check(quota "core/;config/;metrics/;quota/;hiredis/;openssl/;spdlog/;prometheus/;arpa/;netinet/;sys/;fcntl.h;netdb.h;poll.h;pthread.h;unistd.h")
levee_check(sim "core/;config/;sim/;yaml-cpp/")
