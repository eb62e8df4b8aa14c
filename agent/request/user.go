package request

import "fmt"

// MaxUserBytes is the longest user name a registration may carry.
const MaxUserBytes = 64

// ValidateUser checks the user name a registration may carry (the job's
// owner: Slurm's SLURM_JOB_USER, Flux's job owner): empty (not named), or
// 1 to MaxUserBytes bytes of the POSIX portable user name characters
// [A-Za-z0-9._-], not beginning with '-', with an optional trailing '$'
// (Samba machine accounts). It names the job's user in reports, logs and
// the mesh's teardown records, never a metric label. It returns an
// *InputError with Field "user" that says what is wrong and where.
func ValidateUser(u string) error {
	switch {
	case u == "":
		return nil
	case len(u) > MaxUserBytes:
		return Invalid("user", "user name %s is %d bytes, longer than %d", Quote(u), len(u), MaxUserBytes)
	case u == "$":
		return Invalid("user", "user name %s has no name before its '$'", Quote(u))
	case u[0] == '-':
		return Invalid("user", "user name %s begins with '-'", Quote(u))
	}
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		case c == '$' && i == len(u)-1:
		case c == '$':
			return Invalid("user", "user name %s has '$' at byte %d: only a trailing '$' is allowed", Quote(u), i)
		default:
			return Invalid("user", "user name %s has %s at byte %d: only letters, digits, '.', '_', '-' and a trailing '$' are allowed",
				Quote(u), describeByte(c), i)
		}
	}
	return nil
}

// CheckUser is the policy for a registration's user name: a user name that
// ValidateUser refuses is dropped, never the registration. A teardown
// supervisor must not lose a job's supervision (its deadline, its
// diagnosis, the node's DOWN) over the label it would carry: the job is
// registered without a user, and the error (Field "user") is returned as a
// warning for the caller to log and pass on. It returns the user to keep
// (u, or "" when dropped).
func CheckUser(u string) (string, error) {
	if err := ValidateUser(u); err != nil {
		return "", err
	}
	return u, nil
}

func describeByte(c byte) string {
	switch {
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("control byte 0x%02x", c)
	case c >= 0x80:
		return fmt.Sprintf("non-ASCII byte 0x%02x", c)
	case c == ' ':
		return "a space"
	}
	return fmt.Sprintf("%q", c)
}

// UserWarning is the warning said when a registration's user name was
// dropped (CheckUser): what was wrong and that the job is supervised all
// the same.
func UserWarning(job string, err error) string {
	return fmt.Sprintf("job %s: %v; the job is registered and supervised without a user name", job, err)
}
