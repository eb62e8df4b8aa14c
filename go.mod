module github.com/gracewatch/gracewatch

go 1.26.0

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/pelletier/go-toml/v2 v2.4.3
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)

require github.com/stretchr/testify v1.12.1 // indirect
