// Noticing that a client hung up while its request waits without writing (a non-streaming
// completion). cpp-httplib 0.11 hands a handler no socket and no "connection closed" hook, so the
// handler finds its connection among the process's sockets by the peer address the request
// names (Request::remote_addr / remote_port: a connection's peer address and port are unique in
// the process) and asks the kernel whether the peer closed it. Linux only (/proc/self/fd,
// POLLRDHUP), as kvq is.
#pragma once

#include <string>

namespace kvq::serve {

// The socket whose peer is remote_addr:remote_port (numeric, as cpp-httplib writes it), or -1.
int find_client_socket(const std::string& remote_addr, int remote_port);

// Whether the peer of socket fd closed the connection or shut down its sending side (a client
// that gave up), without reading from it. False for fd < 0.
bool peer_closed(int fd);

}  // namespace kvq::serve
