package auth

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ReadTokenFile reads static bearer tokens in kube-apiserver's
// --token-auth-file format: CSV lines "token,user,uid[,groups]", groups
// comma-separated and so quoted when more than one
// ("t,alice,u1,\"dev,ops\""). As there, lines may have more columns (they
// are ignored), a line with an empty token is skipped, and of duplicate
// tokens the last wins. A line with fewer than three columns or malformed
// CSV is an error naming the file and line.
func ReadTokenFile(path string) (map[string]User, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: token file: %w", err)
	}
	defer f.Close()
	tokens, err := parseTokenFile(f)
	if err != nil {
		return nil, fmt.Errorf("auth: token file %s: %w", path, err)
	}
	return tokens, nil
}

func parseTokenFile(r io.Reader) (map[string]User, error) {
	tokens := make(map[string]User)
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	for {
		record, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		if err != nil {
			return nil, err // a *csv.ParseError names the line
		}
		if len(record) < 3 {
			line, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("line %d: must have at least 3 columns (token, user name, user uid), found %d", line, len(record))
		}
		if record[0] == "" {
			continue
		}
		u := User{Name: record[1], UID: record[2]}
		if len(record) >= 4 {
			u.Groups = strings.Split(record[3], ",")
		}
		tokens[record[0]] = u
	}
}
