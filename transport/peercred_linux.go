package transport

import (
	"errors"
	"net"
	"syscall"
)

// peerCred returns the uid and gid of the process at the other end of a
// Unix socket, as the kernel recorded them at connect (SO_PEERCRED): the
// peer cannot forge them.
func peerCred(nc net.Conn) (uid, gid uint32, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0, 0, errors.New("not a Unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, serr
	}
	return cred.Uid, cred.Gid, nil
}
