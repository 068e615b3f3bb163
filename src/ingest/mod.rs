//! Socket receivers: UDP, Unix datagram and Unix stream.
