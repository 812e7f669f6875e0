//go:build !linux

package transport

import (
	"errors"
	"net"
)

// The event-driven servers need epoll; elsewhere Serve refuses them.

const eventLoopSupported = false

type evConn struct {
	serverConn
}

type eventLoop struct{}

func (s *Server) startLoops() error {
	return errors.New("socket_server epoll needs Linux")
}

func (s *Server) signalLoops(bool) {}

func (s *Server) adopt(nc net.Conn, c *evConn) { nc.Close() }

func (s *Server) newEvConn() *evConn { return &evConn{} }
