// TCP socket options applied to both sides of every spliced connection.
#pragma once

#include <uv.h>

#include "kprism/config.h"

namespace kprism {

// TCP_NODELAY, SO_KEEPALIVE (+ idle/interval/count) and TCP_USER_TIMEOUT as configured.
// Best effort: failures are not fatal for the connection. Returns 0 or the first error.
int apply_tcp_options(uv_tcp_t* tcp, const Settings& s);

}  // namespace kprism
