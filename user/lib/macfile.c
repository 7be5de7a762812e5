// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Authenticated, append-only small state files (macfile.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "audit_read.h"
#include "fileio.h"
#include "log.h"
#include "macfile.h"

#define MAC_HDR     ",\"mac\":\""
#define MAC_HDR_LEN (sizeof(MAC_HDR) - 1)

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int egr_file_set_append_only(int fd, bool on)
{
	int flags;

	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0)
		return errno == ENOTTY || errno == EINVAL ? -EOPNOTSUPP : -errno;
	if (!!(flags & FS_APPEND_FL) == on)
		return 0;
	flags = on ? flags | FS_APPEND_FL : flags & ~FS_APPEND_FL;
	if (ioctl(fd, FS_IOC_SETFLAGS, &flags) < 0)
		return errno == ENOTTY || errno == EINVAL ? -EOPNOTSUPP : -errno;
	return 0;
}

int egr_file_is_append_only(int fd)
{
	int flags;

	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0)
		return errno == ENOTTY || errno == EINVAL ? -EOPNOTSUPP : -errno;
	return !!(flags & FS_APPEND_FL);
}

/* Set or clear the flag on path (missing: 0). */
static int path_append_only(const char *path, bool on)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK), err;

	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	err = egr_file_set_append_only(fd, on);
	close(fd);
	return err;
}

/* Compaction: the whole file rewritten once appends made it this big. */
static bool needs_compaction(off_t size, size_t len)
{
	return (uint64_t)size > 4 * (uint64_t)len + (64u << 10);
}

int egr_macfile_write(const char *path, const json_t *obj, const uint8_t *key, size_t keylen,
		      int *append_err)
{
	char hex[EGR_AUDIT_HASH_HEX + 1], *s, *line = NULL;
	size_t slen, len;
	struct stat st;
	int err, aerr = 0, fd = -1;

	if (append_err)
		*append_err = 0;
	if (!path || !json_is_object(obj) || !json_object_size(obj) || json_object_get(obj, "mac") ||
	    !key || !keylen)
		return -EINVAL;
	s = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s)
		return -ENOMEM;
	slen = strlen(s);
	/* The MAC covers the bytes before its member: "{...". */
	err = egr_hmac_sha256_hex(key, keylen, s, slen - 1, hex);
	len = slen - 1 + MAC_HDR_LEN + EGR_AUDIT_HASH_HEX + 3;
	if (!err && !(line = malloc(len + 1)))
		err = -ENOMEM;
	if (err)
		goto out;
	snprintf(line, len + 1, "%.*s" MAC_HDR "%s\"}\n", (int)(slen - 1), s, hex);
	/* One append per update (the last line is the state): a kill at any
	 * point leaves the file append-only, never a window where it is not. */
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (!needs_compaction(st.st_size, len)) {
		err = egr_write_all(fd, line, len);
		if (!err && fdatasync(fd) < 0)
			err = -errno;
		if (!err)
			aerr = egr_file_set_append_only(fd, true);
		if (!err && st.st_size == 0)
			err = egr_fsync_parent(path);
		goto out;
	}
	/* Rare: rewrite it whole. A rename over an append-only file is refused:
	 * the flag is lifted (CAP_LINUX_IMMUTABLE) and set on the new file. */
	close(fd);
	fd = -1;
	aerr = path_append_only(path, false);
	err = egr_replace_file(path, line, len, 0600);
	if (!err) {
		int e2 = path_append_only(path, true);

		if (!aerr)
			aerr = e2;
	}
out:
	if (append_err)
		*append_err = aerr;
	if (fd >= 0)
		close(fd);
	free(s);
	free(line);
	return err;
}

int egr_macfile_parse(const char *buf, size_t len, const uint8_t *key, size_t keylen,
		      json_t **out, const char **why)
{
	char hex[EGR_AUDIT_HASH_HEX + 1];
	const char *mac = NULL;
	json_t *o;
	size_t end = len;

	*out = NULL;
	*why = NULL;
	if (!buf || !key || !keylen)
		return -EINVAL;
	if (end && buf[end - 1] == '\n')
		end--;
	/* The state is the last line; the earlier ones are superseded (and
	 * never fallen back to: an appended bad line is a failed MAC). */
	{
		const char *nl = memrchr(buf, '\n', end);

		if (nl) {
			size_t off = (size_t)(nl + 1 - buf);

			buf += off;
			end -= off;
		}
	}
	/* `,"mac":"<64 hex>"}` closes the object. */
	if (end < MAC_HDR_LEN + EGR_AUDIT_HASH_HEX + 3 || buf[end - 1] != '}' ||
	    buf[end - 2] != '"' ||
	    memcmp(buf + end - 2 - EGR_AUDIT_HASH_HEX - MAC_HDR_LEN, MAC_HDR, MAC_HDR_LEN)) {
		*why = "no mac member at its end";
		return -EBADMSG;
	}
	mac = buf + end - 2 - EGR_AUDIT_HASH_HEX;
	if (!is_hex(mac, EGR_AUDIT_HASH_HEX)) {
		*why = "mac is not 64 hex digits";
		return -EBADMSG;
	}
	if (egr_hmac_sha256_hex(key, keylen, buf, (size_t)(mac - MAC_HDR_LEN - buf), hex))
		return -ENOMEM;
	if (CRYPTO_memcmp(hex, mac, EGR_AUDIT_HASH_HEX)) {
		*why = "the mac does not match (edited, or another key)";
		return -EBADMSG;
	}
	o = json_loadb(buf, end, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		*why = "not a JSON object";
		return -EBADMSG;
	}
	json_object_del(o, "mac");
	*out = o;
	return 0;
}

int egr_macfile_read(const char *path, const uint8_t *key, size_t keylen, json_t **out,
		     const char **why)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), err;
	struct stat st;
	char *buf = NULL;
	ssize_t n;

	*out = NULL;
	*why = NULL;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)EGR_MACFILE_MAX) {
		*why = "not a regular file of a sane size";
		err = -EBADMSG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n != st.st_size) {
		err = n < 0 ? -errno : -EIO;
		goto out;
	}
	err = egr_macfile_parse(buf, (size_t)n, key, keylen, out, why);
out:
	free(buf);
	close(fd);
	return err;
}

int egr_key_load_or_create(const char *path, uint8_t **key, size_t *keylen)
{
	uint8_t k[32];
	int fd, err;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
	if (fd >= 0) {
		err = getrandom(k, sizeof(k), 0) == (ssize_t)sizeof(k) ? 0 : -EIO;
		if (!err)
			err = egr_write_all(fd, k, sizeof(k));
		if (!err && fsync(fd) < 0)
			err = -errno;
		close(fd);
		explicit_bzero(k, sizeof(k));
		if (!err)
			err = egr_fsync_parent(path);
		if (err) {
			unlink(path);
			return err;
		}
		log_info("created the ledger key %s (audit.state and billing.state MACs)", path);
	} else if (errno != EEXIST) {
		return -errno;
	}
	return egr_audit_load_key(path, key, keylen);
}
