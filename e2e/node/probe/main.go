// Command probe runs inside a pod on the end-to-end node and checks, in
// order, the steps named on its command line; it prints one line per step
// and exits 1 at the first failure, so the pod's phase and log say what broke.
//
//	probe api         POST a SelfSubjectReview to the API server through the
//	                  `kubernetes` Service (KUBERNETES_SERVICE_HOST/PORT) with
//	                  the pod's service-account token, verifying the serving
//	                  certificate with the mounted CA; prints the user name.
//	probe get <url>   plain HTTP GET; prints the status and the body.
//	probe write <path> <text>
//	                  writes text to a file (mode 0640), e.g. on a volume.
//	probe sleep       blocks until the pod is stopped.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	arguments := os.Args[1:]
	if len(arguments) == 0 {
		fail("usage: probe (api | get <url> | write <path> <text> | sleep)...")
	}
	for len(arguments) > 0 {
		step := arguments[0]
		arguments = arguments[1:]
		switch step {
		case "api":
			api()
		case "get":
			if len(arguments) == 0 {
				fail("get: missing the URL")
			}
			get(arguments[0])
			arguments = arguments[1:]
		case "write":
			if len(arguments) < 2 {
				fail("write: needs a path and a text")
			}
			if err := os.WriteFile(arguments[0], []byte(arguments[1]), 0o640); err != nil {
				fail("write: " + err.Error())
			}
			fmt.Printf("write: %s (%d bytes)\n", arguments[0], len(arguments[1]))
			arguments = arguments[2:]
		case "sleep":
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
			fmt.Println("sleep: waiting for SIGTERM")
			<-stop
			fmt.Println("sleep: stopped")
		default:
			fail("unknown step " + step)
		}
	}
}

func fail(message string) {
	fmt.Println("probe failed: " + message)
	os.Exit(1)
}

func api() {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		fail("api: KUBERNETES_SERVICE_HOST/PORT are not set")
	}
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		fail("api: " + err.Error())
	}
	caPEM, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		fail("api: " + err.Error())
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		fail("api: no certificate in " + serviceAccountDir + "/ca.crt")
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	request, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		fail("api: " + err.Error())
	}
	request.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	request.Header.Set("Content-Type", "application/json")
	response, err := client.Do(request)
	if err != nil {
		fail("api: " + err.Error())
	}
	defer response.Body.Close()
	answer, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusCreated && response.StatusCode != http.StatusOK {
		fail(fmt.Sprintf("api: %s answered %d: %s", url, response.StatusCode, answer))
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(answer, &review); err != nil {
		fail("api: " + err.Error())
	}
	fmt.Printf("api: %s answered %d user=%s\n", url, response.StatusCode, review.Status.UserInfo.Username)
}

func get(url string) {
	client := &http.Client{Timeout: 10 * time.Second}
	response, err := client.Get(url)
	if err != nil {
		fail("get: " + err.Error())
	}
	defer response.Body.Close()
	answer, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		fail(fmt.Sprintf("get: %s answered %d: %s", url, response.StatusCode, answer))
	}
	fmt.Printf("get: %s answered %d body=%s\n", url, response.StatusCode, strings.TrimSpace(string(answer)))
}
