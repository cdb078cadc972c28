//! DuckDB vectors and types to Arrow and back: a data chunk's columns are read as Arrow
//! arrays (copied: the kernels may keep what they are given), a result array is written into
//! DuckDB's result vector, and an Arrow type is declared as a DuckDB logical type.
//!
//! Types both ways: BOOLEAN, the signed and unsigned integers, FLOAT, DOUBLE, VARCHAR, BLOB,
//! LIST and STRUCT of those. Anything else is an error naming the type.

use std::ffi::{c_char, CStr, CString};
use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayData, ArrayRef, AsArray, BinaryBuilder, BooleanArray, ListArray,
    StringBuilder, StructArray, UInt32Array,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, Fields};
use libduckdb_sys as ffi;

pub type Result<T> = std::result::Result<T, String>;

/// An owned `duckdb_logical_type`, destroyed on drop (DuckDB copies a type it is given).
pub struct LogicalType(pub ffi::duckdb_logical_type);

impl Drop for LogicalType {
    fn drop(&mut self) {
        unsafe { ffi::duckdb_destroy_logical_type(&mut self.0) }
    }
}

impl LogicalType {
    pub fn of(id: ffi::DUCKDB_TYPE) -> Self {
        Self(unsafe { ffi::duckdb_create_logical_type(id) })
    }

    /// The DuckDB type an Arrow type is declared as.
    pub fn from_arrow(t: &DataType) -> Result<Self> {
        use ffi::*;
        let id = match t {
            DataType::Boolean => DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN,
            DataType::Int8 => DUCKDB_TYPE_DUCKDB_TYPE_TINYINT,
            DataType::Int16 => DUCKDB_TYPE_DUCKDB_TYPE_SMALLINT,
            DataType::Int32 => DUCKDB_TYPE_DUCKDB_TYPE_INTEGER,
            DataType::Int64 => DUCKDB_TYPE_DUCKDB_TYPE_BIGINT,
            DataType::UInt8 => DUCKDB_TYPE_DUCKDB_TYPE_UTINYINT,
            DataType::UInt16 => DUCKDB_TYPE_DUCKDB_TYPE_USMALLINT,
            DataType::UInt32 => DUCKDB_TYPE_DUCKDB_TYPE_UINTEGER,
            DataType::UInt64 => DUCKDB_TYPE_DUCKDB_TYPE_UBIGINT,
            DataType::Float32 => DUCKDB_TYPE_DUCKDB_TYPE_FLOAT,
            DataType::Float64 => DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR
            }
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                DUCKDB_TYPE_DUCKDB_TYPE_BLOB
            }
            DataType::List(f) | DataType::LargeList(f) => {
                let child = Self::from_arrow(f.data_type())?;
                return Ok(Self(unsafe { duckdb_create_list_type(child.0) }));
            }
            DataType::Struct(fields) => {
                let names = fields
                    .iter()
                    .map(|f| CString::new(f.name().as_str()).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<_>>>()?;
                let types = fields
                    .iter()
                    .map(|f| Self::from_arrow(f.data_type()))
                    .collect::<Result<Vec<_>>>()?;
                let mut name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
                let mut type_ptrs: Vec<duckdb_logical_type> = types.iter().map(|t| t.0).collect();
                return Ok(Self(unsafe {
                    duckdb_create_struct_type(
                        type_ptrs.as_mut_ptr(),
                        name_ptrs.as_mut_ptr(),
                        fields.len() as idx_t,
                    )
                }));
            }
            other => return Err(format!("type {other} has no DuckDB counterpart here")),
        };
        Ok(Self::of(id))
    }
}

/// The Arrow array of the first `len` rows of `vector`.
///
/// # Safety
/// `vector` must be a live, flat vector with at least `len` rows.
pub unsafe fn read(vector: ffi::duckdb_vector, len: usize) -> Result<ArrayRef> {
    let ty = LogicalType(ffi::duckdb_vector_get_column_type(vector));
    read_as(vector, &ty, len)
}

/// The validity of `vector`'s first `len` rows: DuckDB's mask is 64-bit words, least
/// significant bit first, set = valid, which is Arrow's bitmap.
unsafe fn nulls(vector: ffi::duckdb_vector, len: usize) -> Option<NullBuffer> {
    let validity = ffi::duckdb_vector_get_validity(vector);
    if validity.is_null() || len == 0 {
        return None;
    }
    let words = std::slice::from_raw_parts(validity, len.div_ceil(64));
    let nulls = NullBuffer::new(BooleanBuffer::new(Buffer::from_slice_ref(words), 0, len));
    (nulls.null_count() > 0).then_some(nulls)
}

/// A fixed-width column: its values copied as they lie.
unsafe fn fixed(
    vector: ffi::duckdb_vector,
    t: DataType,
    width: usize,
    len: usize,
) -> Result<ArrayRef> {
    let data = ffi::duckdb_vector_get_data(vector) as *const u8;
    let values = if len == 0 {
        // Aligned even when empty (an empty Vec's pointer is not).
        Buffer::from(arrow::buffer::MutableBuffer::new(0))
    } else {
        Buffer::from_slice_ref(std::slice::from_raw_parts(data, len * width))
    };
    let nulls = nulls(vector, len);
    let data = ArrayData::builder(t)
        .len(len)
        .add_buffer(values)
        .nulls(nulls)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(make_array(data))
}

/// The bytes of a DuckDB string (inlined up to 12 bytes, else behind a pointer).
unsafe fn string_bytes(s: &ffi::duckdb_string_t) -> &[u8] {
    let len = s.value.inlined.length as usize;
    if len <= 12 {
        std::slice::from_raw_parts(s.value.inlined.inlined.as_ptr() as *const u8, len)
    } else {
        std::slice::from_raw_parts(s.value.pointer.ptr as *const u8, len)
    }
}

unsafe fn read_as(vector: ffi::duckdb_vector, ty: &LogicalType, len: usize) -> Result<ArrayRef> {
    use ffi::*;
    let id = duckdb_get_type_id(ty.0);
    let width = |t: DataType| {
        let w = t.primitive_width().unwrap_or(1);
        (t, w)
    };
    let (t, w) = match id {
        DUCKDB_TYPE_DUCKDB_TYPE_TINYINT => width(DataType::Int8),
        DUCKDB_TYPE_DUCKDB_TYPE_SMALLINT => width(DataType::Int16),
        DUCKDB_TYPE_DUCKDB_TYPE_INTEGER => width(DataType::Int32),
        DUCKDB_TYPE_DUCKDB_TYPE_BIGINT => width(DataType::Int64),
        DUCKDB_TYPE_DUCKDB_TYPE_UTINYINT => width(DataType::UInt8),
        DUCKDB_TYPE_DUCKDB_TYPE_USMALLINT => width(DataType::UInt16),
        DUCKDB_TYPE_DUCKDB_TYPE_UINTEGER => width(DataType::UInt32),
        DUCKDB_TYPE_DUCKDB_TYPE_UBIGINT => width(DataType::UInt64),
        DUCKDB_TYPE_DUCKDB_TYPE_FLOAT => width(DataType::Float32),
        DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE => width(DataType::Float64),
        DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN => {
            let data = duckdb_vector_get_data(vector) as *const u8;
            let bytes = if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(data, len)
            };
            let values = BooleanBuffer::from_iter(bytes.iter().map(|&b| b != 0));
            return Ok(Arc::new(BooleanArray::new(values, nulls(vector, len))));
        }
        DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR | DUCKDB_TYPE_DUCKDB_TYPE_BLOB => {
            return strings(vector, id == DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR, len)
        }
        DUCKDB_TYPE_DUCKDB_TYPE_LIST => return list(vector, ty, len),
        DUCKDB_TYPE_DUCKDB_TYPE_STRUCT => return structure(vector, ty, len),
        DUCKDB_TYPE_DUCKDB_TYPE_SQLNULL => {
            return Ok(arrow::array::new_null_array(&DataType::Null, len))
        }
        other => return Err(format!("DuckDB type {} is not supported", type_name(other))),
    };
    fixed(vector, t, w, len)
}

unsafe fn strings(vector: ffi::duckdb_vector, text: bool, len: usize) -> Result<ArrayRef> {
    let data = ffi::duckdb_vector_get_data(vector) as *const ffi::duckdb_string_t;
    let nulls = nulls(vector, len);
    let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
    if text {
        let mut b = StringBuilder::with_capacity(len, len * 8);
        for i in 0..len {
            if valid(i) {
                let bytes = string_bytes(&*data.add(i));
                b.append_value(std::str::from_utf8(bytes).map_err(|e| e.to_string())?);
            } else {
                b.append_null();
            }
        }
        Ok(Arc::new(b.finish()))
    } else {
        let mut b = BinaryBuilder::with_capacity(len, len * 8);
        for i in 0..len {
            if valid(i) {
                b.append_value(string_bytes(&*data.add(i)));
            } else {
                b.append_null();
            }
        }
        Ok(Arc::new(b.finish()))
    }
}

unsafe fn list(vector: ffi::duckdb_vector, ty: &LogicalType, len: usize) -> Result<ArrayRef> {
    let entries = ffi::duckdb_vector_get_data(vector) as *const ffi::duckdb_list_entry;
    let nulls = nulls(vector, len);
    let child_ty = LogicalType(ffi::duckdb_list_type_child_type(ty.0));
    let child = ffi::duckdb_list_vector_get_child(vector);
    let child_len = ffi::duckdb_list_vector_get_size(vector) as usize;
    let values = read_as(child, &child_ty, child_len)?;
    // The rows' entries in row order, NULL rows empty; a gather when they do not lie so.
    let mut offsets = Vec::with_capacity(len + 1);
    let mut take = Vec::new();
    let mut contiguous = true;
    offsets.push(0i32);
    for i in 0..len {
        let (start, n) = if nulls.as_ref().is_none_or(|m| m.is_valid(i)) {
            let e = *entries.add(i);
            (e.offset as usize, e.length as usize)
        } else {
            (take.len(), 0)
        };
        if start + n > child_len {
            return Err(format!(
                "a list entry ({start}+{n}) runs past its child ({child_len})"
            ));
        }
        contiguous &= start == take.len();
        take.extend((start..start + n).map(|j| j as u32));
        offsets.push(i32::try_from(take.len()).map_err(|_| "list too long".to_string())?);
    }
    let values = if contiguous {
        values.slice(0, take.len())
    } else {
        arrow::compute::take(&values, &UInt32Array::from(take), None).map_err(|e| e.to_string())?
    };
    let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
    let list = ListArray::try_new(field, OffsetBuffer::new(offsets.into()), values, nulls)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(list))
}

unsafe fn structure(vector: ffi::duckdb_vector, ty: &LogicalType, len: usize) -> Result<ArrayRef> {
    let n = ffi::duckdb_struct_type_child_count(ty.0);
    let mut fields = Vec::with_capacity(n as usize);
    let mut columns = Vec::with_capacity(n as usize);
    for i in 0..n {
        let raw = ffi::duckdb_struct_type_child_name(ty.0, i);
        let name = CStr::from_ptr(raw).to_string_lossy().into_owned();
        ffi::duckdb_free(raw as *mut std::ffi::c_void);
        let child_ty = LogicalType(ffi::duckdb_struct_type_child_type(ty.0, i));
        let column = read_as(
            ffi::duckdb_struct_vector_get_child(vector, i),
            &child_ty,
            len,
        )?;
        fields.push(Field::new(name, column.data_type().clone(), true));
        columns.push(column);
    }
    let s = StructArray::try_new(Fields::from(fields), columns, nulls(vector, len))
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(s))
}

fn type_name(id: ffi::DUCKDB_TYPE) -> String {
    use ffi::*;
    match id {
        DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL => "DECIMAL".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_DATE => "DATE".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP => "TIMESTAMP".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_HUGEINT => "HUGEINT".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_MAP => "MAP".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_ARRAY => "ARRAY".into(),
        DUCKDB_TYPE_DUCKDB_TYPE_ENUM => "ENUM".into(),
        other => format!("number {other}"),
    }
}

/// Writes `a` into rows `at..at + a.len()` of `vector` (a result vector of the type
/// [`LogicalType::from_arrow`] declares for `a`'s type).
///
/// # Safety
/// `vector` must be a live, writable vector of that type with room for those rows.
pub unsafe fn write(a: &ArrayRef, vector: ffi::duckdb_vector, at: usize) -> Result<()> {
    if a.null_count() > 0 {
        ffi::duckdb_vector_ensure_validity_writable(vector);
        let validity = ffi::duckdb_vector_get_validity(vector);
        for i in (0..a.len()).filter(|&i| a.is_null(i)) {
            ffi::duckdb_validity_set_row_invalid(validity, (at + i) as u64);
        }
    }
    let data = ffi::duckdb_vector_get_data(vector) as *mut u8;
    match a.data_type() {
        t if t.is_primitive() => {
            let w = t.primitive_width().unwrap_or(0);
            let data_of_a = a.to_data();
            let (start, end) = (data_of_a.offset() * w, (data_of_a.offset() + a.len()) * w);
            let bytes = &data_of_a.buffers()[0].as_slice()[start..end];
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.add(at * w), bytes.len());
        }
        DataType::Boolean => {
            let b = a.as_boolean();
            for i in 0..b.len() {
                *data.add(at + i) = u8::from(b.is_valid(i) && b.value(i));
            }
        }
        DataType::Utf8 | DataType::Binary => {
            for i in (0..a.len()).filter(|&i| a.is_valid(i)) {
                let bytes: &[u8] = match a.data_type() {
                    DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
                    _ => a.as_binary::<i32>().value(i),
                };
                ffi::duckdb_vector_assign_string_element_len(
                    vector,
                    (at + i) as u64,
                    bytes.as_ptr() as *const c_char,
                    bytes.len() as u64,
                );
            }
        }
        DataType::LargeUtf8 | DataType::Utf8View => write(&cast(a, &DataType::Utf8)?, vector, at)?,
        DataType::LargeBinary | DataType::BinaryView => {
            write(&cast(a, &DataType::Binary)?, vector, at)?
        }
        DataType::LargeList(f) => {
            let t = DataType::List(Arc::clone(f));
            write(&cast(a, &t)?, vector, at)?
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let offsets = l.value_offsets();
            let (first, last) = (offsets[0] as usize, offsets[l.len()] as usize);
            let base = ffi::duckdb_list_vector_get_size(vector) as usize;
            let size = (base + last - first) as u64;
            if ffi::duckdb_list_vector_reserve(vector, size) != ffi::DuckDBSuccess
                || ffi::duckdb_list_vector_set_size(vector, size) != ffi::DuckDBSuccess
            {
                return Err("could not grow a result list".into());
            }
            // After reserving: reserving may move the child's data.
            let child = ffi::duckdb_list_vector_get_child(vector);
            write(&l.values().slice(first, last - first), child, base)?;
            let entries = ffi::duckdb_vector_get_data(vector) as *mut ffi::duckdb_list_entry;
            for i in 0..l.len() {
                *entries.add(at + i) = ffi::duckdb_list_entry {
                    offset: (base + offsets[i] as usize - first) as u64,
                    length: (offsets[i + 1] - offsets[i]) as u64,
                };
            }
        }
        DataType::Struct(_) => {
            for (i, column) in a.as_struct().columns().iter().enumerate() {
                write(
                    column,
                    ffi::duckdb_struct_vector_get_child(vector, i as u64),
                    at,
                )?;
            }
        }
        DataType::Null => {}
        other => return Err(format!("type {other} cannot be returned to DuckDB here")),
    }
    Ok(())
}

pub fn cast(a: &ArrayRef, t: &DataType) -> Result<ArrayRef> {
    if a.data_type() == t {
        return Ok(Arc::clone(a));
    }
    arrow::compute::cast(a, t).map_err(|e| e.to_string())
}
