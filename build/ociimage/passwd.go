package main

// passwdPath is where -passwd puts passwd.
const passwdPath = "/etc/passwd"

// passwd is distroless's /etc/passwd: root, nobody and nonroot (65532,
// the user the weighstation image runs as). The runtime reads it for the
// container's HOME; Go's os/user (without cgo) for the user's name.
const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`
