// The end-to-end node's probe image (e2e/node.sh builds it, static, into an
// OCI image): standard library only, so it needs no module downloads.
module saint.work/e2e/node-probe

go 1.24.0
