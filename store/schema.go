package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout this code writes.
//
//	0: buckets "qp" and "mr" only (no "meta"); values are the fields alone,
//	   without a version byte or an owner.
//	1: bucket "meta" with key "version" (u32, big endian) = 1; values carry
//	   a version byte and their owner (see codec.go).
//	2: values also carry the entry's version (a hybrid logical clock value,
//	   see hlc.go); bucket "tomb" holds tombstones of removed entries.
//	3: every value of "qp", "mr" and "tomb" ends with a CRC-32C of its key
//	   and its bytes, so a value damaged on disk or moved under another key
//	   is found (ErrDamaged) instead of served.
//
// Open migrates an older file (including a new, empty one) to version 3
// in one transaction, through each version in turn: version-0 entries get
// the zero Owner, version-1 entries get entry version 0 (any replicated
// write of the same key wins over them), and version-2 values and
// tombstones get their checksum. A value or key that does not decode
// aborts the migration and leaves the file as it was (ErrDamaged). A file
// of a newer version is refused with ErrSchema and left untouched.
const SchemaVersion = 3

var (
	bucketMeta = []byte("meta")
	bucketQP   = []byte("qp")
	bucketMR   = []byte("mr")
	bucketTomb = []byte("tomb")
	keyVersion = []byte("version")
)

// fileVersion reads the schema version of an open file.
func fileVersion(tx *bolt.Tx) (uint32, error) {
	m := tx.Bucket(bucketMeta)
	if m == nil {
		return 0, nil
	}
	v := m.Get(keyVersion)
	if v == nil {
		return 0, nil
	}
	if len(v) != 4 {
		return 0, fmt.Errorf("%w: %w: version value of %d bytes", ErrDamaged, ErrSchema, len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}

// migrate brings the file to SchemaVersion, or refuses a newer one.
func migrate(db *bolt.DB) error {
	var ver uint32
	if err := db.View(func(tx *bolt.Tx) (err error) {
		ver, err = fileVersion(tx)
		return err
	}); err != nil {
		return err
	}
	switch {
	case ver == SchemaVersion:
		return nil
	case ver > SchemaVersion:
		return fmt.Errorf("%w: file has version %d, this code knows up to %d", ErrSchema, ver, SchemaVersion)
	}
	return db.Update(func(tx *bolt.Tx) error {
		if ver < 1 {
			if err := migrateV0(tx); err != nil {
				return err
			}
		}
		if ver < 2 {
			if err := migrateV1(tx); err != nil {
				return err
			}
		}
		return migrateV2(tx)
	})
}

func setVersion(tx *bolt.Tx, v uint32) error {
	m, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	return m.Put(keyVersion, binary.BigEndian.AppendUint32(nil, v))
}

// rewrite replaces every value of bucket b with conv(key, value); keys
// and values are collected first, since bbolt forbids writing while
// iterating. what names the bucket in errors. A value conv refuses (it
// does not decode) is damage: the error wraps ErrDamaged, and the caller's
// transaction is rolled back.
func rewrite(b *bolt.Bucket, what string, conv func(k, v []byte) ([]byte, error)) error {
	type kv struct{ k, v []byte }
	var all []kv
	if err := b.ForEach(func(k, v []byte) error {
		nv, err := conv(k, v)
		if err != nil {
			return fmt.Errorf("%w: migrate %s %x: %w", ErrDamaged, what, k, err)
		}
		all = append(all, kv{append([]byte(nil), k...), nv})
		return nil
	}); err != nil {
		return err
	}
	for _, e := range all {
		if err := b.Put(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// migrateV2 appends its checksum to every schema-2 value and tombstone
// (schema 3) and records version 3.
func migrateV2(tx *bolt.Tx) error {
	qp, mr, tomb := tx.Bucket(bucketQP), tx.Bucket(bucketMR), tx.Bucket(bucketTomb)
	if qp == nil || mr == nil || tomb == nil {
		return fmt.Errorf("%w: version-2 file without its qp, mr and tomb buckets", ErrDamaged)
	}
	if err := rewrite(qp, "QP", func(k, v []byte) ([]byte, error) {
		if _, err := decodeQPKey(k); err != nil {
			return nil, err
		}
		b, o, ver, err := decodeQPBackupV2(v)
		if err != nil {
			return nil, err
		}
		return encodeQPBackup(k, b, o, ver)
	}); err != nil {
		return err
	}
	if err := rewrite(mr, "MR", func(k, v []byte) ([]byte, error) {
		if _, err := decodeMRKey(k); err != nil {
			return nil, err
		}
		b, o, ver, err := decodeMRBackupV2(v)
		if err != nil {
			return nil, err
		}
		return encodeMRBackup(k, b, o, ver)
	}); err != nil {
		return err
	}
	if err := rewrite(tomb, "tombstone", func(k, v []byte) ([]byte, error) {
		if _, err := decodeRef(k); err != nil {
			return nil, err
		}
		o, ver, err := decodeTombV2(v)
		if err != nil {
			return nil, err
		}
		return encodeTomb(k, o, ver)
	}); err != nil {
		return err
	}
	return setVersion(tx, 3)
}

// migrateV1 rewrites every schema-1 value with entry version 0, creates
// the tombstone bucket and records version 2.
func migrateV1(tx *bolt.Tx) error {
	qp, mr := tx.Bucket(bucketQP), tx.Bucket(bucketMR)
	if qp == nil || mr == nil {
		return fmt.Errorf("%w: version-1 file without its qp and mr buckets", ErrDamaged)
	}
	if err := rewrite(qp, "QP", func(_, v []byte) ([]byte, error) {
		b, o, err := decodeQPBackupV1(v)
		if err != nil {
			return nil, err
		}
		return encodeQPBackupV2(b, o, 0)
	}); err != nil {
		return err
	}
	if err := rewrite(mr, "MR", func(_, v []byte) ([]byte, error) {
		b, o, err := decodeMRBackupV1(v)
		if err != nil {
			return nil, err
		}
		return encodeMRBackupV2(b, o, 0)
	}); err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketTomb); err != nil {
		return err
	}
	return setVersion(tx, 2)
}

// migrateV0 rewrites every schema-0 value with a version byte and the zero
// owner, then records version 1.
func migrateV0(tx *bolt.Tx) error {
	qp, err := tx.CreateBucketIfNotExists(bucketQP)
	if err != nil {
		return err
	}
	mr, err := tx.CreateBucketIfNotExists(bucketMR)
	if err != nil {
		return err
	}
	if err := rewrite(qp, "QP", func(k, v []byte) ([]byte, error) {
		if _, err := decodeQPKey(k); err != nil {
			return nil, err
		}
		b, err := decodeQPBackupV0(v)
		if err != nil {
			return nil, err
		}
		return encodeQPBackupV1(b, Owner{})
	}); err != nil {
		return err
	}
	if err := rewrite(mr, "MR", func(k, v []byte) ([]byte, error) {
		if _, err := decodeMRKey(k); err != nil {
			return nil, err
		}
		b, err := decodeMRBackupV0(v)
		if err != nil {
			return nil, err
		}
		return encodeMRBackupV1(b, Owner{})
	}); err != nil {
		return err
	}
	return setVersion(tx, 1)
}
