/* The libev backends of the peer core (impls/libev/backend.c). */
#ifndef TMO_LIBEV_LIBEV_H
#define TMO_LIBEV_LIBEV_H

#include "peer/peer.h"

extern const struct peer_backend tmo__peer_libev, tmo__peer_libev_loop;

#endif
