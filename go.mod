module github.com/ibpath/ibpath

go 1.26

require (
	github.com/urfave/cli/v2 v2.27.5
	go.etcd.io/bbolt v1.4.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.5 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
