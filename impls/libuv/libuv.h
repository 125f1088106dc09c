/* The libuv backends of the peer core (impls/libuv/backend.c). */
#ifndef TMO_LIBUV_LIBUV_H
#define TMO_LIBUV_LIBUV_H

#include "peer/peer.h"

extern const struct peer_backend tmo__peer_libuv, tmo__peer_libuv_loop;

#endif
